// Graphs whose sizes wrap 32 or 64 bits, through the real daemon: a 180-byte
// graph with mesh tp x dp = 6 x 715827883 (2^32 + 2, which read as 2 devices
// passed validation on a 2-device job, and grew the daemon ~200 MB/s until the
// OOM killer stopped it), its relatives, and shapes whose bytes overflow.
// Each is INVALID_ARGUMENT naming the field, through `validate` and `submit`,
// answered at once; afterwards the daemon is idle, its memory where it was,
// and it still runs a job.
#include <chrono>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"

namespace overlap::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct WrappingGraph {
  std::string name;
  std::string text;
  std::vector<std::string> mentions;  // substrings of the refusal
};

// One all-reduce over the mesh's devices 0 and 1, as in the report.
std::string MeshGraph(const std::string& mesh) {
  return "name: wrap\ndevices: [0, 1]\nmesh: " + mesh +
         "\nops:\n  - {id: g, type: all_reduce, m: 6, n: 6, group: tp, mode: serial}\n";
}

std::vector<WrappingGraph> WrappingGraphs() {
  return {
      {"6 x 715827883 wraps to 2",
       MeshGraph("{tp: 6, dp: 715827883}"),
       {"mesh.dp", "must be at most 65536"}},
      {"2147483647 x 2 wraps to -2",
       MeshGraph("{tp: 2147483647, dp: 2}"),
       {"mesh.tp", "must be at most 65536"}},
      {"65536 x 65536 wraps to 0",
       MeshGraph("{tp: 65536, dp: 65536}"),
       {"mesh: tp x dp = 65536 x 65536 = 4294967296 devices is more than the 65536"}},
      {"4 x 1073741825 over all 4 devices",
       "name: wrap\nmesh: {tp: 4, dp: 1073741825}\n"
       "ops: [{id: g, type: all_reduce, m: 8, n: 8, group: dp, mode: serial}]\n",
       {"mesh.dp", "must be at most 65536"}},
      {"m = k = 2^32",
       "name: big\nops: [{id: a, type: ag_gemm, m: 4294967296, k: 4294967296, n: 4}]\n",
       {"ops[0]: m*k overflows 64 bits (4294967296 x 4294967296)"}},
      {"Y's bytes past 2^63",
       "name: big\nops: [{id: a, type: all_reduce, m: 4611686018427387904, n: 1}]\n",
       {"ops[0]: Y (m*n) has 4611686018427387904 elements"}},
  };
}

class SizeArithmeticTest : public DaemonTest {};

TEST_F(SizeArithmeticTest, GraphsWhoseSizesWrapAreRefusedAtOnceAndLeaveNothingBehind) {
  StartDaemon();
  ASSERT_TRUE(BecomesIdle(daemon_->pid()));
  const int64_t rss_before = ProcessRssBytes(daemon_->pid());
  ASSERT_GT(rss_before, 0);
  for (const WrappingGraph& graph : WrappingGraphs()) {
    const std::string path = dir_.File("wrap.yaml");
    WriteFileOrDie(path, graph.text);
    for (const char* command : {"validate", "submit"}) {
      SCOPED_TRACE(graph.name + " through " + command);
      const auto start = Clock::now();
      RunResult refused = daemon_->Ctl({command, path}, std::chrono::seconds(20));
      EXPECT_LT(Clock::now() - start, std::chrono::seconds(15)) << "answered at once";
      EXPECT_EQ(refused.exit_code, 3) << Describe(refused);
      EXPECT_THAT(refused.err, HasSubstr("overlapctl: INVALID_ARGUMENT: "));
      for (const std::string& mention : graph.mentions) {
        EXPECT_THAT(refused.err, HasSubstr(mention));
      }
      EXPECT_THAT(refused.err, Not(HasSubstr("-2 devices")));
    }
  }
  RunResult list = daemon_->Ctl({"list"});
  ASSERT_EQ(list.exit_code, 0) << Describe(list);
  EXPECT_THAT(list.out, Not(HasSubstr("wrap"))) << "nothing was queued";
  EXPECT_TRUE(BecomesIdle(daemon_->pid())) << "a thread kept a core busy";
  EXPECT_LT(ProcessRssBytes(daemon_->pid()), rss_before + (int64_t{64} << 20));
  // And it still runs a real mesh job.
  const std::string mesh = dir_.File("mesh.yaml");
  WriteFileOrDie(mesh,
                 "name: mesh-ok\niterations: 2\nwarmup: 0\nmesh: {tp: 2, dp: 2}\n"
                 "ops: [{id: g, type: all_reduce, m: 8, n: 8, group: dp, mode: serial}]\n");
  RunResult ran = daemon_->Ctl({"submit", mesh, "--wait"}, std::chrono::seconds(120));
  EXPECT_EQ(ran.exit_code, 0) << Describe(ran);
}

}  // namespace
}  // namespace overlap::testing
