// fuzz_replay_test: the fuzz targets without libFuzzer, in the ordinary build,
// so that `ctest` replays every kept input as a regression test:
//
//   fuzz_replay_test TARGET DIR...
//
// feeds every file under each DIR (tests/fuzz/corpus/TARGET, which must be
// there, and tests/fuzz/regressions/TARGET, which may not) to TARGET's
// LLVMFuzzerTestOneInput, compiled
// here under another name (tests/fuzz/CMakeLists.txt). It fails as a fuzz run
// would: a crash or a FUZZ_CHECK aborts it, and an input that runs longer than
// --timeout_s or takes the peak resident memory past --rss_limit_mb fails it.
// The file being replayed is named first.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#define OVERLAP_FUZZ_TARGET(name) \
  extern "C" int OverlapFuzz_##name(const uint8_t* data, size_t size);
#include "fuzz_targets.inc"
#undef OVERLAP_FUZZ_TARGET

namespace {

using FuzzFunction = int (*)(const uint8_t*, size_t);

const std::map<std::string, FuzzFunction>& Targets() {
  static const auto* const targets = new std::map<std::string, FuzzFunction>{
#define OVERLAP_FUZZ_TARGET(name) {#name, &OverlapFuzz_##name},
#include "fuzz_targets.inc"
#undef OVERLAP_FUZZ_TARGET
  };
  return *targets;
}

// The input being replayed, for the signal handlers (written before each).
char current_input[4096];

void SayWhichInput(const char* what) {
  const char* parts[] = {"fuzz_replay_test: ", what, " on ", current_input, "\n"};
  for (const char* part : parts) {
    if (write(STDERR_FILENO, part, strlen(part)) < 0) break;
  }
}

void OnTimeout(int) {
  SayWhichInput("timeout");
  _exit(1);
}

void OnCrash(int signal_number) {
  SayWhichInput(strsignal(signal_number));
  signal(signal_number, SIG_DFL);
  raise(signal_number);
}

long PeakRssMb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024;  // KiB on Linux
}

std::vector<std::filesystem::path> FilesUnder(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

int Usage() {
  std::fprintf(stderr,
               "usage: fuzz_replay_test [--timeout_s=S] [--rss_limit_mb=MB] TARGET DIR...\n"
               "targets:");
  for (const auto& [name, function] : Targets()) std::fprintf(stderr, " %s", name.c_str());
  std::fprintf(stderr, "\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned timeout_s = 10;
  long rss_limit_mb = 2048;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--timeout_s=", 0) == 0) {
      timeout_s = std::stoul(arg.substr(12));
    } else if (arg.rfind("--rss_limit_mb=", 0) == 0) {
      rss_limit_mb = std::stol(arg.substr(15));
    } else {
      args.push_back(arg);
    }
  }
  if (args.size() < 2) return Usage();
  const auto target = Targets().find(args[0]);
  if (target == Targets().end()) return Usage();

  signal(SIGALRM, OnTimeout);
  for (int s : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) signal(s, OnCrash);
  size_t replayed = 0;
  for (size_t d = 1; d < args.size(); ++d) {
    const std::filesystem::path dir = args[d];
    if (!std::filesystem::is_directory(dir)) {
      // The corpus must be there; a target may have no reproducer yet.
      if (d == 1) {
        std::fprintf(stderr, "fuzz_replay_test: %s is not a directory\n", dir.c_str());
        return 1;
      }
      continue;
    }
    for (const std::filesystem::path& file : FilesUnder(dir)) {
      std::snprintf(current_input, sizeof(current_input), "%s", file.c_str());
      std::ifstream in(file, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      const auto start = std::chrono::steady_clock::now();
      alarm(timeout_s);
      target->second(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      alarm(0);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (PeakRssMb() > rss_limit_mb) {
        std::fprintf(stderr, "fuzz_replay_test: %s took the peak RSS to %ld MB (limit %ld)\n",
                     file.c_str(), PeakRssMb(), rss_limit_mb);
        return 1;
      }
      if (seconds > 1) std::fprintf(stderr, "slow: %s took %.1f s\n", file.c_str(), seconds);
      ++replayed;
    }
  }
  if (replayed == 0) {
    std::fprintf(stderr, "fuzz_replay_test: no input for %s: a target keeps a corpus\n",
                 args[0].c_str());
    return 1;
  }
  std::printf("fuzz_replay_test %s: %zu inputs replayed, no failure\n",
              args[0].c_str(), replayed);
  return 0;
}
