// What RunJob checks before it allocates: a mesh that does not cover the
// job's devices (computed in 64 bits: 6 x 715827883 is 2 only in 32) is
// refused before any group list or buffer is sized by it, and a job cancelled
// before an op starts builds nothing for that op.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "server/runner/job_runner.h"
#include "tests/host_engine_util.h"

namespace overlap::runner {
namespace {

using ::testing::HasSubstr;

JobSpec OneAllReduce() {
  JobSpec spec;
  spec.name = "guards";
  spec.dtype = DType::kF32;
  spec.iterations = 2;
  spec.warmup = 0;
  spec.layer_step = false;
  spec.timeline = false;
  OpSpec op;
  op.id = "g";
  op.type = OpType::kAllReduce;
  op.m = 8;
  op.n = 8;
  op.mode = OverlapMode::kSerial;
  op.transport = Transport::kNccl;
  spec.ops.push_back(op);
  return spec;
}

TEST(RunJobGuardsTest, AMeshThatDoesNotCoverTheDevicesIsRefusedBeforeAnythingIsBuilt) {
  auto engine = CheckedHostEngine(2);
  JobSpec spec = OneAllReduce();
  for (const Mesh& mesh : {Mesh{6, 715827883}, Mesh{2147483647, 2}, Mesh{2, 2}}) {
    spec.mesh = mesh;
    int progress = 0;
    RunHooks hooks;
    hooks.on_progress = [&](const Progress&) { ++progress; };
    absl::StatusOr<JobReport> report = RunJob(*engine, spec, {0, 1}, hooks, {});
    ASSERT_FALSE(report.ok()) << mesh.tp << " x " << mesh.dp;
    EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(report.status().message()),
                HasSubstr("does not cover the job's 2 devices"));
    EXPECT_EQ(progress, 0) << "no op was set up";
  }
  spec.mesh = Mesh{2, 1};
  EXPECT_TRUE(RunJob(*engine, spec, {0, 1}, {}, {}).ok());
}

TEST(RunJobGuardsTest, AJobCancelledBeforeAnOpStartsSetsNothingUp) {
  auto engine = CheckedHostEngine(2);
  std::atomic<int> progress{0};
  RunHooks hooks;
  hooks.on_progress = [&](const Progress&) { ++progress; };
  hooks.cancelled = [] { return true; };
  absl::StatusOr<JobReport> report = RunJob(*engine, OneAllReduce(), {0, 1}, hooks, {});
  EXPECT_EQ(report.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(progress.load(), 0) << "the op's setup did not start";
}

}  // namespace
}  // namespace overlap::runner
