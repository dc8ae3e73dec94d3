// Ops whose inputs are other ops' outputs (graph key `input`) on the host
// backend: the layer step hands each output on through the activation, and
// the last op of a chain is checked against float64 of the whole chain.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/graph_parser.h"
#include "common/overlap_pass.h"
#include "server/ops/chain_reference.h"
#include "server/ops/layer_ops.h"
#include "server/ops/reference.h"
#include "server/runner/job_runner.h"
#include "tests/host_engine_util.h"
#include "tests/job_result_util.h"

namespace overlap::runner {
namespace {

// The MLP block over 2 ranks: fc1 gathers the rows and writes [m, 2 x ffn]
// split by columns; SwiGLU halves each rank's share to ffn / 2; fc2 reads it
// as its row-parallel input and reduce-scatters.
std::string MlpBlock(const std::string& dtype, const std::string& activation) {
  const bool gated = activation == "swiglu";
  return absl::StrCat("name: mlp\ndtype: ", dtype,
                      "\niterations: 1\nwarmup: 0\ntimeline: false\nops:\n"
                      "  - {id: fc1, type: ag_gemm, m: 128, k: 64, n: ",
                      gated ? 256 : 128,
                      ", mode: serial, transport: p2p}\n"
                      "  - {id: fc2, type: gemm_rs, m: 128, k: 128, n: 64, mode: chunked, "
                      "chunks: 2, transport: p2p, input: fc1, activation: ",
                      activation, "}\n");
}

class ChainDTypeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ChainDTypeTest, MlpBlockVerifiesEndToEnd) {
  auto engine = CheckedHostEngine(2);
  for (const std::string activation : {"swiglu", "gelu", "none"}) {
    absl::StatusOr<JobSpec> spec = ParseJobSpec(MlpBlock(GetParam(), activation));
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto result = RunJobResult(*engine, *spec, {0, 1}, {}, nullptr);
    ASSERT_TRUE(result.ok()) << activation << ": " << result.status();
    ASSERT_EQ(result->layer_chains_size(), 1) << activation;
    const v1::LayerChainCheck& check = result->layer_chains(0);
    EXPECT_EQ(check.op(), "fc2");
    EXPECT_EQ(check.chain(),
              activation == "none" ? "fc1 -> fc2" : absl::StrCat("fc1 -", activation, "-> fc2"));
    EXPECT_GT(check.max_rel_error(), 0) << activation;
    EXPECT_LE(check.max_rel_error(), check.tolerance()) << activation;
    // Two ops' tolerances at least.
    EXPECT_GE(check.tolerance(), 2 * ops::OutputTolerance(OpType::kAgGemm, spec->dtype, 2));
  }
}

INSTANTIATE_TEST_SUITE_P(EveryDType, ChainDTypeTest,
                         ::testing::Values("bf16", "fp16", "fp32", "fp8"));

// Exposed communication counts communication only: at tp 1 nothing moves
// between devices, so the layer step exposes none, whatever the SwiGLU pass
// between fc1 and fc2 takes (reported apart); at tp 2 the step less the GEMMs
// alone and that pass.
TEST(ChainTest, ExposedCommunicationLeavesTheActivationPassOut) {
  auto engine = CheckedHostEngine(2);
  std::string text = MlpBlock("fp32", "swiglu");
  text.replace(text.find("iterations: 1"), 13, "iterations: 5");
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text);
  ASSERT_TRUE(spec.ok()) << spec.status();
  for (const std::vector<int>& devices : {std::vector<int>{0}, std::vector<int>{0, 1}}) {
    SCOPED_TRACE(devices.size());
    auto result = RunJobResult(*engine, *spec, devices, {}, nullptr);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_GT(result->layer_step().median_ms(), 0);
    EXPECT_GT(result->layer_activation_ms(), 0);
    if (devices.size() == 1) {
      EXPECT_EQ(result->layer_exposed_comm_ms(), 0);
      continue;
    }
    double gemms_ms = 0;
    for (const v1::OpResult& op : result->ops()) gemms_ms += op.gemm_alone().median_ms();
    EXPECT_DOUBLE_EQ(
        result->layer_exposed_comm_ms(),
        std::max(0.0, result->layer_step().median_ms() - gemms_ms - result->layer_activation_ms()));
  }
}

// At one rank fc1's GEMM writes its whole output: the gelu runs in its
// epilogue (the host backend's, as cuBLASLt's GELU_AUX on CUDA), so no pass
// reads fc1's output back; the chain still verifies against float64, with the
// hazard checker on. Over two ranks the pass stays.
TEST(ChainTest, GeluAtOneRankRunsInTheProducersEpilogue) {
  auto engine = CheckedHostEngine(2);
  for (const std::string dtype : {"bf16", "fp16", "fp32"}) {
    absl::StatusOr<JobSpec> spec = ParseJobSpec(MlpBlock(dtype, "gelu"));
    ASSERT_TRUE(spec.ok()) << spec.status();
    for (const std::vector<int>& devices : {std::vector<int>{0}, std::vector<int>{0, 1}}) {
      SCOPED_TRACE(absl::StrCat(dtype, " over ", devices.size()));
      auto result = RunJobResult(*engine, *spec, devices, {}, nullptr);
      ASSERT_TRUE(result.ok()) << result.status();
      ASSERT_EQ(result->ops_size(), 2);
      const bool epilogue = devices.size() == 1 && dtype != "fp32";
      EXPECT_EQ(result->ops(1).edge(), epilogue ? "epilogue gelu" : "fused gelu");
      if (epilogue) {
        EXPECT_EQ(result->layer_activation_ms(), 0) << "no pass to time";
      }
      ASSERT_EQ(result->layer_chains_size(), 1);
      EXPECT_LE(result->layer_chains(0).max_rel_error(), result->layer_chains(0).tolerance());
      EXPECT_GT(result->layer_chains(0).max_rel_error(), 0);
    }
  }
}

// The reference tells a chain that ran from one that did not: fc2 run on its
// own seeded inputs fails the chain's check, and passes once fc1's output,
// through SwiGLU, is its input.
TEST(ChainTest, ReferenceFailsWhenTheInputWasNotHandedOn) {
  auto engine = CheckedHostEngine(2);
  absl::StatusOr<JobSpec> spec = ParseJobSpec(MlpBlock("bf16", "swiglu"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::vector<int> devices = {0, 1};
  ops::Schedule serial;
  serial.mode = OverlapMode::kSerial;
  serial.transport = Transport::kP2p;
  serial.chunks = 1;
  std::vector<std::unique_ptr<ops::OpContext>> ctx;
  for (const OpSpec& op : spec->ops) {
    auto c = ops::OpContext::Create(*engine, op, spec->dtype, devices,
                                    ops::BuffersFor(op, 2, serial), ops::RankLayout{2, {}});
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE(ops::FillInputs(**c, spec->seed, ops::InputKeyOf(op.id)).ok());
    ctx.push_back(std::move(*c));
  }
  ASSERT_TRUE(engine->Synchronize(devices).ok());
  absl::Status status = ops::EnqueueOp(*ctx[0], serial);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_TRUE(ops::EnqueueOp(*ctx[1], serial).ok());
  ASSERT_TRUE(engine->Synchronize(devices).ok());
  ops::ChainReference chain(*spec, 2);
  absl::StatusOr<ops::Verification> seeded = chain.Verify(1, *ctx[1]);
  ASSERT_TRUE(seeded.ok()) << seeded.status();
  EXPECT_GT(seeded->max_rel_error, 0.5);

  for (int r = 0; r < 2; ++r) {
    engine::ElementwiseArgs args;
    const LocalShapes& out = ctx[0]->shapes();
    args.src = ctx[0]->Rows(ctx[0]->rank(r).y, 0, out.y_rows, out.y_cols);
    args.dst = ctx[1]->Rows(ctx[1]->rank(r).a, 0, out.y_rows, out.y_cols / 2);
    args.rows = out.y_rows;
    args.src_cols = out.y_cols;
    args.activation = Activation::kSwiglu;
    ASSERT_TRUE(engine->Elementwise(ctx[1]->rank(r).compute, args).ok());
  }
  ASSERT_TRUE(ops::EnqueueOp(*ctx[1], serial).ok());
  ASSERT_TRUE(engine->Synchronize(devices).ok());
  ops::ChainReference again(*spec, 2);
  absl::StatusOr<ops::Verification> handed_on = again.Verify(1, *ctx[1]);
  ASSERT_TRUE(handed_on.ok()) << handed_on.status();
  EXPECT_LE(handed_on->max_rel_error, again.Tolerance(1));
  EXPECT_EQ(handed_on->rows_checked, 12);
  EXPECT_EQ(handed_on->cols_checked, 64);
}

// The fused graph computes what the unfused one does: each fused op's output,
// run alone on the data the pass gave it, matches the float64 reference of the
// unfused pair it replaced (a gather then a GEMM; a GEMM then a reduction),
// in bf16 and, but for the gather, in fp8.
TEST(ChainTest, FusedOpsComputeWhatTheirUnfusedPairsDo) {
  auto engine = CheckedHostEngine(2);
  for (const std::string dtype : {"bf16", "fp8"}) {
    SCOPED_TRACE(dtype);
    absl::StatusOr<JobSpec> unfused = ParseJobSpec(
        absl::StrCat("name: u\ndtype: ", dtype,
                     "\nops:\n"
                     "  - {id: x, type: all_gather, m: 128, n: 64}\n"
                     "  - {id: fc1, type: gemm, m: 128, k: 64, n: 128, input: x}\n"
                     "  - {id: fc2, type: gemm, parallel: row, m: 128, k: 128, n: 64}\n"
                     "  - {id: fc2_rs, type: reduce_scatter, m: 128, n: 64, input: fc2}\n"
                     "  - {id: out, type: gemm, parallel: row, m: 128, k: 128, n: 64}\n"
                     "  - {id: out_ar, type: all_reduce, m: 128, n: 64, input: out}\n"));
    ASSERT_TRUE(unfused.ok()) << unfused.status();
    const JobSpec fused = FuseCollectives(*unfused);
    ASSERT_EQ(fused.ops.size(), 3u);
    ops::ChainReference reference(*unfused, 2);
    // Each fused op and the unfused op whose output it now writes.
    const std::pair<int, int> pairs[] = {{0, 1}, {1, 3}, {2, 5}};
    for (const auto& [fused_index, unfused_index] : pairs) {
      // An fp8 all_gather alone holds its data at scale 1 (no GEMM to scale
      // for); the fused ag_gemm draws A at the GEMM's fp8 scale: other data.
      if (dtype == "fp8" && fused_index == 0) continue;
      const OpSpec& op = fused.ops[fused_index];
      ops::Schedule schedule;
      schedule.mode = OverlapMode::kSerial;
      schedule.transport = Transport::kP2p;
      schedule.chunks = 1;
      auto ctx = ops::OpContext::Create(*engine, op, fused.dtype, {0, 1},
                                        ops::BuffersFor(op, 2, schedule), ops::RankLayout{2, {}});
      ASSERT_TRUE(ctx.ok()) << ctx.status();
      ASSERT_TRUE(ops::FillInputs(**ctx, fused.seed, ops::InputKeysOf(op)).ok());
      ASSERT_TRUE(engine->Synchronize({0, 1}).ok());
      ASSERT_TRUE(ops::EnqueueOp(**ctx, schedule).ok());
      ASSERT_TRUE(engine->Synchronize({0, 1}).ok());
      absl::StatusOr<ops::Verification> v = reference.Verify(unfused_index, **ctx);
      ASSERT_TRUE(v.ok()) << v.status();
      EXPECT_LE(v->max_rel_error, reference.Tolerance(unfused_index)) << op.id;
      EXPECT_GT(v->max_rel_error, 0) << op.id;
    }
  }
}

// A tensor-parallel op's weight gradient is what its data-parallel all-reduce
// sums: each device's shard, across the replicas (2 x 2 mesh).
TEST(ChainTest, DataParallelAllReduceSumsTheWeightGradients) {
  auto engine = CheckedHostEngine(4);
  absl::StatusOr<JobSpec> spec = ParseJobSpec(
      "name: grads\ndtype: bf16\niterations: 1\nwarmup: 0\ntimeline: false\n"
      "mesh: {tp: 2, dp: 2}\nops:\n"
      "  - {id: fc1_wgrad, type: gemm, m: 64, k: 128, n: 128}\n"
      "  - {id: fc1_grads, type: all_reduce, m: 64, n: 64, group: dp, transport: p2p, "
      "input: fc1_wgrad}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto result = RunJobResult(*engine, *spec, {0, 1, 2, 3}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->layer_chains_size(), 1);
  EXPECT_EQ(result->layer_chains(0).chain(), "fc1_wgrad -> fc1_grads");
  EXPECT_GT(result->layer_chains(0).max_rel_error(), 0);
  EXPECT_LE(result->layer_chains(0).max_rel_error(), result->layer_chains(0).tolerance());
}

}  // namespace
}  // namespace overlap::runner
