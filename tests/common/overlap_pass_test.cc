// The overlap pass, rewrite by rewrite, and the pairs it must leave alone.
#include "common/overlap_pass.h"

#include <string>
#include <tuple>
#include <vector>

#include "common/graph_parser.h"
#include "common/graph_validator.h"
#include "common/model_graph.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/op_spec_util.h"

namespace overlap {
namespace {

using ::testing::ElementsAre;

JobSpec Parse(const std::string& ops) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec("name: t\nops:\n" + ops);
  EXPECT_TRUE(spec.ok()) << spec.status();
  ValidationLimits limits;
  limits.device_count = 2;
  EXPECT_TRUE(ValidateJobSpec(*spec, limits).ok()) << ValidateJobSpec(*spec, limits).status();
  return *spec;
}

// all_gather -> gemm, gemm (row) -> reduce_scatter, gemm (row) -> all_reduce,
// and what reads or waits on the collectives reads or waits on the fused op.
TEST(OverlapPassTest, FusesEachPairIntoItsOverlappedOp) {
  const JobSpec spec = Parse(
      "  - {id: x, type: all_gather, m: 64, n: 32, transport: p2p}\n"
      "  - {id: fc1, type: gemm, m: 64, k: 32, n: 128, input: x}\n"
      "  - {id: fc2, type: gemm, parallel: row, m: 64, k: 64, n: 32, input: fc1, "
      "activation: swiglu}\n"
      "  - {id: fc2_rs, type: reduce_scatter, m: 64, n: 32, input: fc2}\n"
      "  - {id: out, type: gemm, parallel: row, m: 64, k: 32, n: 32, after: [fc2_rs]}\n"
      "  - {id: out_ar, type: all_reduce, m: 64, n: 32, input: out, transport: nccl}\n"
      "  - {id: next, type: all_gather, m: 64, n: 32, input: fc2_rs, after: [out_ar]}\n");
  const JobSpec fused = FuseCollectives(spec);
  ASSERT_EQ(fused.ops.size(), 4u);
  auto row = [](const OpSpec& op) {
    return std::tuple(op.id, OpTypeName(op.type), op.m, op.k, op.n, op.input,
                      ActivationName(op.activation), op.a_seed_id, op.w_seed_id);
  };
  EXPECT_EQ(row(fused.ops[0]), std::tuple("fc1", "ag_gemm", 64, 32, 128, "", "none", "x", "fc1"));
  EXPECT_EQ(fused.ops[0].transport, Transport::kP2p);
  EXPECT_EQ(row(fused.ops[1]),
            std::tuple("fc2", "gemm_rs", 64, 64, 32, "fc1", "swiglu", "fc2", "fc2"));
  EXPECT_THAT(fused.ops[1].after, ElementsAre("fc1"));
  EXPECT_EQ(row(fused.ops[2]), std::tuple("out", "gemm_ar", 64, 32, 32, "", "none", "out", "out"));
  EXPECT_EQ(fused.ops[2].transport, Transport::kNccl);
  EXPECT_THAT(fused.ops[2].after, ElementsAre("fc2"));
  EXPECT_EQ(fused.ops[3].input, "fc2");
  EXPECT_THAT(fused.ops[3].after, ElementsAre("out", "fc2"));
  ASSERT_EQ(fused.fusions.size(), 3u);
  for (const FusionNote& note : fused.fusions) EXPECT_TRUE(note.fused) << note.collective;
  ValidationLimits limits;
  limits.device_count = 2;
  EXPECT_TRUE(ValidateJobSpec(fused, limits).ok()) << ValidateJobSpec(fused, limits).status();
}

TEST(OverlapPassTest, LeavesAloneWhatTheDataflowDoesNotAllow) {
  // Two consumers of the gather; an activation between a GEMM and its reduction.
  JobSpec spec = Parse(
      "  - {id: x, type: all_gather, m: 64, n: 32}\n"
      "  - {id: a, type: gemm, m: 64, k: 32, n: 32, input: x}\n"
      "  - {id: b, type: gemm, m: 64, k: 32, n: 32, input: x}\n"
      "  - {id: g, type: gemm, parallel: row, m: 64, k: 32, n: 32}\n"
      "  - {id: g_ar, type: all_reduce, m: 64, n: 32, input: g, activation: gelu}\n"
      "  - {id: h, type: gemm, parallel: row, m: 64, k: 32, n: 32}\n"
      "  - {id: h_ar, type: all_reduce, m: 64, n: 32, input: h, algorithm: ring, "
      "transport: p2p}\n");
  JobSpec fused = FuseCollectives(spec);
  EXPECT_EQ(fused.ops.size(), spec.ops.size());
  std::vector<std::string> why;
  for (const FusionNote& note : fused.fusions) {
    EXPECT_FALSE(note.fused);
    why.push_back(note.collective + ": " + note.why_not);
  }
  EXPECT_THAT(why, ElementsAre("x: x's output feeds 2 ops", "x: x's output feeds 2 ops",
                               "g_ar: an activation (gelu) between them",
                               "h_ar: its algorithm is pinned (ring)"));

  // Shapes that disagree (a graph the validator would refuse; the pass checks anyway).
  spec.ops = {MakeOp("x", OpType::kAllGather, 64, 0, 32),
              MakeOp("a", OpType::kGemm, 64, 16, 32)};
  spec.ops[1].input = "x";
  fused = FuseCollectives(spec);
  ASSERT_EQ(fused.fusions.size(), 1u);
  EXPECT_EQ(fused.fusions[0].why_not, "shapes disagree: all_gather [64, 32], gemm [64, 16]");

  // fuse: false runs the graph as written, and says so.
  spec = Parse("  - {id: x, type: all_gather, m: 64, n: 32}\n"
               "  - {id: a, type: gemm, m: 64, k: 32, n: 32, input: x}\n");
  spec.fuse = false;
  fused = FuseCollectives(spec);
  EXPECT_EQ(fused.ops.size(), 2u);
  ASSERT_EQ(fused.fusions.size(), 1u);
  EXPECT_EQ(fused.fusions[0].why_not, "fuse: false");
}

// overlapctl graph --unfused writes what the pass fuses back into the layer
// overlapctl graph writes: the same ops, ids, shapes and wiring.
TEST(OverlapPassTest, UnfusedLayerFusesBackIntoTheLayer) {
  for (const LayerPass pass : {LayerPass::kForward, LayerPass::kBoth}) {
    LayerGraphOptions options;
    options.tp = 2;
    options.pass = pass;
    absl::StatusOr<LayerGraph> layer = BuildLayerGraph(ModelPresets()[0], options);
    ASSERT_TRUE(layer.ok()) << layer.status();
    const JobSpec unfused = UnfuseCollectives(layer->spec);
    EXPECT_GT(unfused.ops.size(), layer->spec.ops.size());
    ValidationLimits limits;
    limits.device_count = 2;
    ASSERT_TRUE(ValidateJobSpec(unfused, limits).ok())
        << ValidateJobSpec(unfused, limits).status();
    const JobSpec fused = FuseCollectives(unfused);
    ASSERT_EQ(fused.ops.size(), layer->spec.ops.size());
    for (size_t i = 0; i < fused.ops.size(); ++i) {
      const OpSpec& a = fused.ops[i];
      const OpSpec& b = layer->spec.ops[i];
      EXPECT_EQ(std::tuple(a.id, a.type, a.m, a.k, a.n, a.input, a.activation),
                std::tuple(b.id, b.type, b.m, b.k, b.n, b.input, b.activation));
    }
  }
}

}  // namespace
}  // namespace overlap
