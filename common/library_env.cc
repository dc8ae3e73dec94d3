#include "common/library_env.h"

#include "absl/strings/match.h"

extern char** environ;

namespace overlap {

std::map<std::string, std::string> LibraryEnvironment() {
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
