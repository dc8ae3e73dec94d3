// A deferred-class job's scheduler: dynamic on the node's lanes (the host
// backend, 4 simulated devices as tp 2 x dp 2, the hazard checker on): its
// gradient all-reduces yield to a session's critical work on their devices
// and pass the deferred gate only at their bound while it stays pending; its
// own critical collectives count as critical work there, so that a session's
// deferred chunk yields to them; its outputs still verify against float64.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "server/engine/device_lanes.h"
#include "server/engine/lane_shared_engine.h"
#include "server/runner/job_runner.h"
#include "tests/host_engine_util.h"
#include "tests/job_result_util.h"
#include "tests/job_spec_util.h"
#include "tests/slow_engine.h"

namespace overlap::runner {
namespace {

using engine::DeviceLanes;
using engine::LaneUser;

constexpr int kSession = static_cast<int>(LaneUser::kSession);
constexpr int kJob = static_cast<int>(LaneUser::kJob);

// Two layers' MLP backward on tp 2 x dp 2: two deferred dp all-reduces of 4
// and 8 chunks, and critical tp collectives (ag_gemm, gemm_rs).
constexpr char kBackward[] = R"(name: shared-lanes
dtype: f32
iterations: 2
warmup: 1
mesh: {tp: 2, dp: 2}
scheduler: dynamic
priority_class: deferred
chunk_kib: 16
bucket_mib: 0
defer_bound_ms: BOUND
ops:
  - {id: fc2_dgrad, type: ag_gemm, m: 128, k: 128, n: 256, mode: serial, transport: nccl}
  - {id: fc2_wgrad, type: gemm, m: 128, k: 128, n: 256, after: [fc2_dgrad]}
  - {id: fc1_dgrad, type: gemm_rs, m: 128, k: 512, n: 128, mode: serial, transport: nccl, after: [fc2_dgrad]}
  - {id: fc1_wgrad, type: gemm, m: 128, k: 128, n: 512, after: [fc1_dgrad]}
  - {id: fc2_grads, type: all_reduce, m: 128, n: 128, group: dp, transport: nccl, input: fc2_wgrad}
  - {id: fc1_grads, type: all_reduce, m: 128, n: 256, group: dp, transport: nccl, input: fc1_wgrad}
)";

JobSpec Backward(const std::string& bound_ms) {
  return ValidJobSpec(absl::StrReplaceAll(kBackward, {{"BOUND", bound_ms}}));
}

v1::JobResult RunBeside(engine::Engine& engine, DeviceLanes& lanes, const JobSpec& spec) {
  engine::LaneSharedEngine shared(engine, lanes, {0, 1, 2, 3});
  RunHooks hooks;
  hooks.lanes = &lanes;
  absl::StatusOr<v1::JobResult> result = RunJobResult(shared, spec, {0, 1, 2, 3}, hooks, nullptr);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : v1::JobResult{};
}

TEST(SharedLanesTest, AJobsChunksYieldToASessionsCriticalWorkAndGoOnlyAtTheirBound) {
  auto engine = CheckedHostEngine(4);
  DeviceLanes lanes(4);
  // A session's critical collective queued on every device for the whole run.
  for (int d = 0; d < 4; ++d) lanes.CriticalBegin(d, LaneUser::kSession);
  const v1::JobResult result = RunBeside(*engine, lanes, Backward("5"));
  ExpectEverythingVerified(result, /*chains=*/2);
  for (const engine::DeviceLaneFigures& f : lanes.Figures()) {
    SCOPED_TRACE(f.device);
    EXPECT_GT(f.deferred_yielded[kJob], 0);
    EXPECT_GT(f.deferred_yielded_to_other[kJob], 0);
    EXPECT_GT(f.deferred_sent[kJob], 0);
    // Every chunk went beside the session's critical work, so only at its bound.
    EXPECT_EQ(f.deferred_over_bound[kJob], f.deferred_sent[kJob]);
    EXPECT_EQ(f.critical_pending[kJob], 0);
    EXPECT_EQ(f.critical_pending[kSession], 1);
    EXPECT_EQ(f.deferred_sent[kSession], 0);
  }
  int forced = 0;
  for (const v1::LayerDeferral& d : result.layer_deferrals()) forced += d.chunks_forced();
  EXPECT_GT(forced, 0);
}

// The job's critical collectives, slow on rank 1, count as critical work on
// device 1 while pending: its own chunks there yield to them, as a session's
// would; with no session and a long bound, nothing goes over it.
TEST(SharedLanesTest, AJobsSlowCriticalWorkCountsOnItsDeviceAndNothingGoesOverItsBound) {
  auto host = CheckedHostEngine(4);
  SlowEngine engine(*host, 1, absl::ZeroDuration(), absl::Milliseconds(15));
  DeviceLanes lanes(4);
  const v1::JobResult result = RunBeside(engine, lanes, Backward("60000"));
  ExpectEverythingVerified(result, /*chains=*/2);
  const std::vector<engine::DeviceLaneFigures> figures = lanes.Figures();
  EXPECT_GT(figures[1].critical_issued[kJob], 0);
  EXPECT_GT(figures[1].deferred_yielded[kJob], 0);
  for (const engine::DeviceLaneFigures& f : figures) {
    SCOPED_TRACE(f.device);
    EXPECT_GT(f.deferred_sent[kJob], 0);
    EXPECT_EQ(f.deferred_over_bound[kJob], 0);
    EXPECT_EQ(f.critical_pending[kJob], 0);
  }
}

TEST(SharedLanesTest, TheGateHoldsADeferredChunkWhileAJobsCriticalWorkIsPending) {
  DeviceLanes lanes(2);
  lanes.CriticalBegin(1, LaneUser::kJob);
  EXPECT_TRUE(lanes.CriticalPending(1));
  EXPECT_TRUE(lanes.CriticalPendingOf(1, LaneUser::kJob));
  EXPECT_FALSE(lanes.CriticalPendingOf(1, LaneUser::kSession));
  EXPECT_FALSE(lanes.PassDeferred({0, 1}, LaneUser::kSession, /*bound_near=*/false));
  EXPECT_TRUE(lanes.PassDeferred({0}, LaneUser::kSession, /*bound_near=*/false));
  EXPECT_TRUE(lanes.PassDeferred({0, 1}, LaneUser::kSession, /*bound_near=*/true));
  lanes.CountYields({0, 1}, LaneUser::kSession, 1, /*to_other=*/true);
  lanes.CriticalEnd(1, LaneUser::kJob);
  EXPECT_TRUE(lanes.PassDeferred({0, 1}, LaneUser::kSession, /*bound_near=*/false));
  const std::vector<engine::DeviceLaneFigures> f = lanes.Figures();
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].deferred_sent[kSession], 3);
  EXPECT_EQ(f[0].deferred_over_bound[kSession], 0);  // device 0 had none pending
  EXPECT_EQ(f[1].deferred_sent[kSession], 2);
  EXPECT_EQ(f[1].deferred_over_bound[kSession], 1);
  EXPECT_EQ(f[1].deferred_yielded[kSession], 1);
  EXPECT_EQ(f[1].deferred_yielded_to_other[kSession], 1);
  EXPECT_EQ(f[1].critical_issued[kJob], 1);
  EXPECT_EQ(f[1].critical_pending[kJob], 0);
}

}  // namespace
}  // namespace overlap::runner
