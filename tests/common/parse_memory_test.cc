// What one parse of a spec of max_spec_bytes (1 MiB) takes at its peak, for
// the worst inputs we know of, each parsed in a child process of its own so
// that the peak is the parse's alone. The figures it prints are the ones in
// docs/DEVELOPMENT.md ("Parsing in bounded memory"); it fails when a parse
// takes more than its budget share (EstimatedParseBytes) or than a bound.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/graph_parser.h"
#include "common/spec_prescan.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

constexpr size_t kSpecBytes = 1 << 20;

// VmRSS or VmHWM of this process, in bytes.
int64_t StatusBytes(const std::string& key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1)) * 1024;
  }
  return -1;
}

struct Measured {
  bool parsed = false;
  int64_t extra_peak = -1;  // VmHWM during the parse minus VmRSS before it
  int64_t estimate = -1;    // EstimatedParseBytes, -1 where the pre-scan refused
};

// Parses `text` as a job spec in a child; what it took at its peak.
Measured MeasureInChild(const std::string& text) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    absl::StatusOr<PrescanFacts> facts = PrescanYaml(text, PrescanLimits());
    Measured m;
    if (facts.ok()) m.estimate = EstimatedParseBytes(static_cast<int64_t>(text.size()), *facts);
    std::ofstream("/proc/self/clear_refs") << "5";  // the peak starts again from now
    const int64_t before = StatusBytes("VmRSS");
    absl::StatusOr<JobSpec> spec = ParseJobSpec(text, "");
    m.parsed = spec.ok();
    m.extra_peak = StatusBytes("VmHWM") - before;
    (void)!write(fds[1], &m, sizeof(m));
    _exit(0);
  }
  close(fds[1]);
  Measured m;
  if (read(fds[0], &m, sizeof(m)) != static_cast<ssize_t>(sizeof(m))) m = Measured();
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  return m;
}

std::string Repeat(const std::string& head, const std::string& item, const std::string& tail,
                   size_t bytes) {
  std::string text = head;
  while (text.size() + item.size() + tail.size() <= bytes) text += item;
  return text + tail;
}

// Ops of 14 values each, up to `bytes` or `ops`.
std::string ManyOps(size_t bytes, int ops) {
  std::string text = "name: many\nops:\n";
  for (int i = 0; i < ops; ++i) {
    const std::string op = absl::StrCat("  - {id: op", i, ", type: gemm, m: 64, k: 64, n: 64, ",
                                        "after: [op", i > 0 ? i - 1 : 0, "]}\n");
    if (text.size() + op.size() > bytes) break;
    text += op;
  }
  return text;
}

// Lists 32 deep, one after another, up to `values` values.
std::string DeepLists(int64_t values) {
  std::string text = "[";
  for (int64_t n = 1; n + 64 < values; n += 32) {
    text += std::string(31, '[') + "1" + std::string(31, ']') + ",";
  }
  return text + "1]";
}

TEST(ParseMemoryTest, TheWorstSpecsOfOneMebibyteStayWithinTheirShare) {
  // Values just under the pre-scan's limit, all on one line: yaml-cpp reads
  // a whole flow collection ahead, so every token is held at once.
  std::string tiny_values = "[";
  for (int i = 0; i < PrescanLimits().max_nodes - 2; ++i) tiny_values += i ? ",1" : "1";
  tiny_values += "]";
  const std::vector<std::pair<std::string, std::string>> inputs = {
      {"1 MiB of [", std::string(kSpecBytes, '[')},
      {"1 MiB of [1,1,...]", Repeat("[", "1,", "1]", kSpecBytes)},
      {"200k values in one flow list", tiny_values},
      {"32-deep lists, repeated",
       Repeat("[", std::string(31, '[') + std::string(31, ']') + ",", "1]", kSpecBytes)},
      {"32-deep lists, 200k values", DeepLists(PrescanLimits().max_nodes - 100)},
      {"one 1 MiB key", "{" + std::string(kSpecBytes - 8, 'k') + ": 1}"},
      {"1 MiB of 'k: v' lines", Repeat("", "k: v\n", "", kSpecBytes)},
      {"'k: v' lines, 200k values", Repeat("", "k: v\n", "", 5 * 99990)},
      {"1 MiB of ops, flow style", ManyOps(kSpecBytes, 1 << 30)},
      {"ops, flow style, 200k values", ManyOps(kSpecBytes, 14000)},
      {"1 MiB of long quoted keys",
       Repeat("{", "\"" + std::string(1000, 'q') + "\": 1, ", "}", kSpecBytes)},
  };
  std::printf("%-34s %10s %12s %12s\n", "input (1 MiB at most)", "pre-scan", "peak MiB",
              "estimate MiB");
  for (const auto& [name, text] : inputs) {
    ASSERT_LE(text.size(), kSpecBytes) << name;
    const Measured m = MeasureInChild(text);
    ASSERT_GE(m.extra_peak, 0) << name << ": the child did not report";
    std::printf("%-34s %10s %12.1f %12.1f\n", name.c_str(), m.estimate < 0 ? "refused" : "passed",
                m.extra_peak / 1048576.0, m.estimate < 0 ? 0.0 : m.estimate / 1048576.0);
    if (m.estimate < 0) {
      // Refused before yaml-cpp: nothing beyond the pre-scan's few bytes.
      EXPECT_LT(m.extra_peak, 4 << 20) << name;
    } else {
      EXPECT_LE(m.extra_peak, m.estimate) << name << ": the budget's share is too small";
      EXPECT_LT(m.extra_peak, 256 << 20) << name;
    }
  }
}

}  // namespace
}  // namespace overlap
