// The layer step on real GPUs (every visible GPU in the group): a small MLP
// block with gradient all-reduces that nothing waits on, deferred to the side
// stream over NCCL (communicator channel 1) and over the copy engines, two of
// them merged into a bucket, and a backward block whose all-gather joins the
// main streams mid-step; every output checked against float64 after a layer
// iteration. Skips without a GPU.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/config.h"
#include "server/cuda/cuda_engine.h"
#include "server/runner/job_runner.h"
#include "tests/gpu_ranks_util.h"
#include "tests/job_result_util.h"

namespace overlap::runner {
namespace {

OpSpec Op(const std::string& id, OpType type, int64_t m, int64_t k, int64_t n, Transport transport,
          std::vector<std::string> after) {
  OpSpec op;
  op.id = id;
  op.type = type;
  op.m = m;
  op.k = k;
  op.n = n;
  op.mode = OverlapMode::kSerial;
  op.transport = transport;
  op.after = std::move(after);
  return op;
}

// Every visible GPU in one group, and a small bf16 job to fill in.
class LayerStepGpuTest : public ::testing::TestWithParam<Transport> {
 protected:
  void SetUp() override {
    auto engine = CreateTestCudaEngine(int64_t{4} << 30);
    if (!engine.ok()) GTEST_SKIP() << "no GPU visible: " << engine.status().message();
    engine_ = std::move(*engine);
    for (int d = 0; d < engine_->DeviceCount(); ++d) devices_.push_back(d);
    spec_.name = "layer-step-gpu";
    spec_.dtype = DType::kBF16;
    spec_.iterations = 5;
    spec_.warmup = 2;
  }
  // While static destructors run, the CUDA runtime and NCCL may already be gone.
  void TearDown() override { engine_.reset(); }

  std::unique_ptr<engine::Engine> engine_;
  std::vector<int> devices_;
  JobSpec spec_;
};

TEST_P(LayerStepGpuTest, DeferredAllReducesAndBucketsMatchFloat64) {
  const int tp = static_cast<int>(devices_.size());
  const Transport transport = GetParam();
  JobSpec& spec = spec_;
  // g1 + g2 (192 KiB x tp) fit one bucket, big (2 MiB x tp) does not.
  spec.bucket_mib = tp;
  spec.ops = {
      Op("fc1", OpType::kAgGemm, 512 * tp, 1024, 768 * tp, transport, {}),
      Op("fc2", OpType::kGemmRs, 512 * tp, 768 * tp, 1024, transport, {"fc1"}),
      Op("big", OpType::kAllReduce, 512 * tp, 0, 2048, transport, {"fc1"}),  // 2 MiB x tp
      Op("g1", OpType::kAllReduce, 64 * tp, 0, 1024, transport, {"fc1"}),
      Op("g2", OpType::kAllReduce, 32 * tp, 0, 1024, transport, {"fc1"}),
  };
  auto result = RunJobResult(*engine_, spec, devices_, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->layer_step().samples(), spec.iterations);
  EXPECT_GT(result->layer_step().median_ms(), 0);
  std::vector<std::string> deferred(result->layer_deferred().begin(),
                                    result->layer_deferred().end());
  EXPECT_EQ(deferred, (std::vector<std::string>{"big", "bucket(g1+g2)"}));
  // The traced layer iteration: the deferred collectives on the side stream
  // only, every span within the step.
  ASSERT_TRUE(result->has_layer_timeline());
  std::map<std::string, std::set<std::string>> lanes_of_op;
  for (const v1::TimelineSpan& span : result->layer_timeline().spans()) {
    lanes_of_op[span.op()].insert(span.lane());
    EXPECT_LE(span.end_ms(), result->layer_timeline().step_ms() + 1e-3) << span.name();
  }
  // Over one rank a collective is no launch at all (the output is its input),
  // so the deferred ops leave no span; over several they run on the side stream.
  const std::set<std::string> deferred_lanes =
      tp == 1 ? std::set<std::string>{} : std::set<std::string>{"side"};
  for (const char* side : {"big", "bucket(g1+g2)"}) {
    EXPECT_EQ(lanes_of_op[side], deferred_lanes) << side;
  }
  EXPECT_EQ(lanes_of_op["fc1"].count("side"), 0u);
  EXPECT_EQ(lanes_of_op["fc2"].count("compute"), 1u);
  for (const v1::OpResult& op : result->ops()) {
    EXPECT_TRUE(op.verified()) << op.id();
    EXPECT_LE(op.max_rel_error(), op.tolerance()) << op.id();
  }
}

// A backward MLP block: the all-gather for fc1's weight gradient runs on the
// side stream beside the GEMM alone before it and joins before the weight-
// gradient GEMM that waits on it, mid-step; the gradient all-reduce joins at
// the end.
TEST_P(LayerStepGpuTest, BackwardGatherJoinsMidStepAndMatchesFloat64) {
  const int tp = static_cast<int>(devices_.size());
  const Transport transport = GetParam();
  JobSpec& spec = spec_;
  // s = 1024 tokens per rank, h = 1024, ffn = 768 per rank.
  const int64_t s = 1024 * tp, h = 1024, f = 768 * tp;
  spec.ops = {
      Op("fc2_dgrad", OpType::kAgGemm, s, h, f, transport, {}),
      Op("x_gather", OpType::kAllGather, s, 0, h, transport, {"fc2_dgrad"}),
      Op("fc2_wgrad", OpType::kGemm, h, s, f, Transport::kNone, {"fc2_dgrad"}),
      Op("fc2_grads", OpType::kAllReduce, h, 0, f, transport, {"fc2_wgrad"}),
      Op("fc1_dgrad", OpType::kGemmRs, s, f, h, transport, {"fc2_dgrad"}),
      Op("fc1_wgrad", OpType::kGemm, h, s, f, Transport::kNone, {"fc1_dgrad", "x_gather"}),
  };
  auto result = RunJobResult(*engine_, spec, devices_, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->layer_step().samples(), spec.iterations);
  EXPECT_GT(result->layer_step().median_ms(), 0);
  const std::vector<std::string> deferred(result->layer_deferred().begin(),
                                          result->layer_deferred().end());
  const std::vector<std::string> joined(result->layer_joined_before().begin(),
                                        result->layer_joined_before().end());
  EXPECT_EQ(deferred, (std::vector<std::string>{"x_gather", "fc2_grads"}));
  EXPECT_EQ(joined, (std::vector<std::string>{"fc1_wgrad", ""}));
  for (const v1::OpResult& op : result->ops()) {
    EXPECT_TRUE(op.verified()) << op.id();
    EXPECT_LE(op.max_rel_error(), op.tolerance()) << op.id();
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, LayerStepGpuTest,
                         ::testing::Values(Transport::kNccl, Transport::kP2p),
                         [](const ::testing::TestParamInfo<Transport>& info) {
                           return TransportName(info.param);
                         });

}  // namespace
}  // namespace overlap::runner
