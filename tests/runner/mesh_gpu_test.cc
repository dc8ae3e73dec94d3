// A tp 2 x dp 2 mesh on the CUDA backend: four ranks, on four GPUs or shared
// by fewer (OVERLAP_TEST_RANKS_PER_GPU=4 on one GPU: copies stand in for NCCL
// between ranks of one GPU). Every group's ops, the dp gradient all-reduces
// chunked and bucketed in the layer step, and the world all-reduce flat and
// hierarchical, each checked against float64. Skips without four ranks.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "common/config.h"
#include "common/graph_parser.h"
#include "server/cuda/cuda_engine.h"
#include "server/runner/job_runner.h"
#include "tests/gpu_ranks_util.h"
#include "tests/job_result_util.h"

namespace overlap::runner {
namespace {

class MeshGpuTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto engine = CreateTestCudaEngine(int64_t{2} << 30);
    if (!engine.ok()) GTEST_SKIP() << "no GPU visible: " << engine.status().message();
    engine_ = std::move(*engine);
    if (engine_->DeviceCount() < 4) {
      GTEST_SKIP() << "needs 4 ranks (" << engine_->DeviceCount()
                   << " here; OVERLAP_TEST_RANKS_PER_GPU=4 on one GPU)";
    }
  }
  void TearDown() override { engine_.reset(); }
  std::unique_ptr<engine::Engine> engine_;
};

TEST_P(MeshGpuTest, EveryGroupAndDeferralMatchesFloat64) {
  const std::string transport = GetParam();
  const std::string yaml = R"(name: mesh-gpu
dtype: bf16
iterations: 5
warmup: 2
mesh: {tp: 2, dp: 2}
chunk_kib: 256
ops:
  - {id: fc2_dgrad, type: ag_gemm, m: 2048, k: 1024, n: 2048, mode: chunked, chunks: 2, transport: TRANSPORT}
  - {id: fc2_wgrad, type: gemm, m: 1024, k: 2048, n: 1024, after: [fc2_dgrad]}
  - {id: fc2_grads, type: all_reduce, m: 1024, n: 1024, group: dp, transport: TRANSPORT, after: [fc2_wgrad]}
  - {id: fc1_dgrad, type: gemm_rs, m: 2048, k: 2048, n: 1024, mode: ring, transport: TRANSPORT, after: [fc2_dgrad]}
  - {id: fc1_wgrad, type: gemm, m: 1024, k: 2048, n: 512, after: [fc1_dgrad]}
  - {id: fc1_grads, type: all_reduce, m: 64, n: 512, group: dp, transport: TRANSPORT, after: [fc1_wgrad]}
  - {id: bias_grads, type: all_reduce, m: 64, n: 512, group: dp, transport: TRANSPORT, after: [fc1_wgrad]}
  - {id: next_dgrad, type: gemm_rs, m: 2048, k: 2048, n: 1024, mode: serial, transport: TRANSPORT, after: [fc1_dgrad]}
  - {id: loss_flat, type: all_reduce, m: 512, n: 1024, group: world, transport: TRANSPORT}
  - {id: loss_hier, type: all_reduce, m: 512, n: 1024, group: world, algorithm: hierarchical, transport: TRANSPORT}
)";
  std::string text = yaml;
  for (size_t at; (at = text.find("TRANSPORT")) != std::string::npos;) {
    text.replace(at, 9, transport);
  }
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto result = RunJobResult(*engine_, *spec, {0, 1, 2, 3}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  for (const v1::OpResult& op : result->ops()) {
    EXPECT_TRUE(op.verified()) << op.id();
    EXPECT_LE(op.max_rel_error(), op.tolerance()) << op.id();
    EXPECT_EQ(op.group_step_ms_size(), op.group() == "world" ? 0 : 2) << op.id();
    // Each group times itself (a mesh op enqueues rather than replay a graph timed on rank 0).
    for (double ms : op.group_step_ms()) EXPECT_GT(ms, 0) << op.id();
    if (op.id() == "loss_hier") {
      EXPECT_EQ(op.algorithm(), "hierarchical");
    }
  }
  ASSERT_TRUE(result->has_layer_step()) << result->layer_note();
  std::map<std::string, std::string> how;
  for (const v1::LayerDeferral& d : result->layer_deferrals()) how[d.op()] = d.how();
  EXPECT_EQ(how["fc2_grads"], "chunked");  // 2 MiB in 256 KiB pieces
  EXPECT_EQ(how["bucket(fc1_grads+bias_grads)"], "bucketed");
  EXPECT_GT(result->layer_step_without_deferred().median_ms(), 0);
}

INSTANTIATE_TEST_SUITE_P(Transports, MeshGpuTest, ::testing::Values("nccl", "p2p"));

}  // namespace
}  // namespace overlap::runner
