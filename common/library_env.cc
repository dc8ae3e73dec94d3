#include "common/library_env.h"

#include "absl/strings/match.h"

extern char** environ;

namespace overlap {

absl::Mutex& EnvironmentMutex() {
  static absl::Mutex* const mu = new absl::Mutex;  // never destroyed: threads may outlive main
  return *mu;
}

std::map<std::string, std::string> LibraryEnvironment() {
  absl::ReaderMutexLock lock(&EnvironmentMutex());
  std::map<std::string, std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    if (!absl::StartsWith(entry, "NCCL_") && !absl::StartsWith(entry, "CUDA_")) continue;
    const size_t eq = entry.find('=');
    out[entry.substr(0, eq)] = eq == std::string::npos ? "" : entry.substr(eq + 1);
  }
  return out;
}

}  // namespace overlap
