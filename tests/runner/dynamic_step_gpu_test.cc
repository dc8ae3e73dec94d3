// scheduler: dynamic on the CUDA backend: a backward with its gradient
// all-reduces dispatched at run time on the deferred lane (lowest-priority
// streams, NCCL channel 2 capped at deferred_lane_ctas), tp 1 x dp 2 on two
// ranks and tp 2 x dp 2 on four (OVERLAP_TEST_RANKS_PER_GPU=2 or 4 on one GPU:
// copies stand in for NCCL between ranks of one GPU, so the figures printed
// mean nothing there). Every op and chain checked against float64. Skips
// without two ranks.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "common/graph_parser.h"
#include "server/runner/job_runner.h"
#include "tests/gpu_ranks_util.h"
#include "tests/job_result_util.h"

namespace overlap::runner {
namespace {

constexpr char kBackward[] = R"(name: dynamic-gpu
dtype: bf16
iterations: 5
warmup: 2
mesh: {tp: TP, dp: 2}
scheduler: dynamic
chunk_kib: 256
bucket_mib: 0
defer_bound_ms: 1000
ops:
  - {id: fc2_dgrad, type: ag_gemm, m: 4096, k: 2048, n: 4096, mode: chunked, chunks: 2, transport: TRANSPORT}
  - {id: fc2_wgrad, type: gemm, m: 2048, k: 4096, n: 2048, after: [fc2_dgrad]}
  - {id: fc2_grads, type: all_reduce, m: 2048, n: N2, group: dp, transport: TRANSPORT, input: fc2_wgrad}
  - {id: fc1_dgrad, type: gemm_rs, m: 4096, k: 4096, n: 2048, mode: serial, transport: TRANSPORT, after: [fc2_dgrad]}
  - {id: fc1_wgrad, type: gemm, m: 2048, k: 4096, n: 4096, after: [fc1_dgrad]}
  - {id: fc1_grads, type: all_reduce, m: 2048, n: N1, group: dp, transport: TRANSPORT, input: fc1_wgrad}
  - {id: proj_dgrad, type: ag_gemm, m: 4096, k: 2048, n: 4096, mode: serial, transport: TRANSPORT, after: [fc1_dgrad]}
)";

class DynamicStepGpuTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto engine = CreateTestCudaEngine(int64_t{8} << 30);
    if (!engine.ok()) GTEST_SKIP() << "no GPU visible: " << engine.status().message();
    engine_ = std::move(*engine);
    if (engine_->DeviceCount() < 2) {
      GTEST_SKIP() << "needs 2 ranks (" << engine_->DeviceCount()
                   << " here; OVERLAP_TEST_RANKS_PER_GPU=2 or 4 on one GPU)";
    }
  }
  void TearDown() override { engine_.reset(); }
  std::unique_ptr<engine::Engine> engine_;
};

TEST_P(DynamicStepGpuTest, GradientsDispatchedAtRunTimeMatchFloat64) {
  const int tp = engine_->DeviceCount() >= 4 ? 2 : 1;
  const std::string text = absl::StrReplaceAll(
      kBackward, {{"TP", std::to_string(tp)},
                  {"TRANSPORT", GetParam()},
                  {"N2", std::to_string(2048 / tp)},
                  {"N1", std::to_string(4096 / tp)}});
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text);
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::vector<int> devices;
  for (int d = 0; d < 2 * tp; ++d) devices.push_back(d);
  auto result = RunJobResult(*engine_, *spec, devices, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  for (const v1::OpResult& op : result->ops()) {
    EXPECT_TRUE(op.verified()) << op.id();
    EXPECT_LE(op.max_rel_error(), op.tolerance()) << op.id();
  }
  ASSERT_EQ(result->layer_chains_size(), 2);
  for (const v1::LayerChainCheck& c : result->layer_chains()) {
    EXPECT_LE(c.max_rel_error(), c.tolerance()) << c.chain();
  }
  EXPECT_EQ(result->layer_scheduler(), "dynamic");
  EXPECT_FALSE(result->layer_captured());
  EXPECT_NE(result->lanes().find("NCCL channel 2"), std::string::npos) << result->lanes();
  int dispatched = 0;
  for (const v1::LayerDeferral& d : result->layer_deferrals()) {
    if (!d.dispatched()) continue;
    ++dispatched;
    EXPECT_GT(d.pieces(), 1) << d.op();
    EXPECT_LE(d.worst_delay_ms(), d.bound_ms()) << d.op();
    std::printf("%s %s: %d chunks, ready %.3f, first %.3f, finished %.3f ms, worst delay %.3f ms, "
                "%d yielded, %d forced\n",
                GetParam().c_str(), d.op().c_str(), d.pieces(), d.ready_ms(), d.first_chunk_ms(),
                d.finished_ms(), d.worst_delay_ms(), d.chunks_yielded(), d.chunks_forced());
  }
  EXPECT_EQ(dispatched, 2);
  EXPECT_EQ(result->lane_figures_size(), 2 * tp);
  for (const v1::LaneFigures& f : result->lane_figures()) {
    EXPECT_GT(f.deferred_busy_ms(), 0) << f.device();
    std::printf("%s device %d: inversion at most %.3f ms, lane busy %.3f ms\n",
                GetParam().c_str(), f.device(), f.inversion_ms(), f.deferred_busy_ms());
  }
  std::printf("%s tp %d x dp 2: layer %.3f ms, %.3f ms without the deferred all-reduces\n",
              GetParam().c_str(), tp, result->layer_step().median_ms(),
              result->layer_step_without_deferred().median_ms());
}

INSTANTIATE_TEST_SUITE_P(Transports, DynamicStepGpuTest, ::testing::Values("nccl", "p2p"));

}  // namespace
}  // namespace overlap::runner
