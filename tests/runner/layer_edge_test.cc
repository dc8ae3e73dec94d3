// How the layer step hands an op's output on to the op that reads it (graph
// key `input`): where their layouts agree the consumer reads the producer's
// output buffer (an alias: no elementwise pass at all), where an activation
// stands between them one fused pass per rank, into an fp8 input one casting
// copy per rank; on the host backend with the hazard checker on, every chain
// checked against float64 and each edge named in the op's report.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/graph_parser.h"
#include "server/runner/layer_members.h"
#include "tests/forwarding_engine.h"
#include "tests/host_engine_util.h"
#include "tests/job_result_util.h"

namespace overlap::runner {
namespace {

// Counts the elementwise passes and forwards every call.
class PassCounter final : public ForwardingEngine {
 public:
  using ForwardingEngine::ForwardingEngine;
  std::atomic<int> passes{0};

  absl::Status Elementwise(engine::StreamId stream, const engine::ElementwiseArgs& args) override {
    ++passes;
    return inner().Elementwise(stream, args);
  }
};

// fc1 (ag_gemm) -> fc2 (gemm_rs) -> fc3 (ag_gemm, reading its shard before
// the gather) -> wgrad (row-parallel gemm) -> grads (all_reduce, deferred:
// nothing waits on it). `activation` stands between fc1 and fc2, the other
// edges have none; `mode` is the GEMM ops' with collectives.
std::string Chain(const std::string& dtype, const std::string& mode,
                  const std::string& activation = "none", const std::string& scheduler = "static") {
  const std::string schedule = mode == "chunked" ? "mode: chunked, chunks: 2, transport: p2p"
                                                 : "mode: serial, transport: p2p";
  const std::string text = absl::StrCat(
      "name: edges\ndtype: ", dtype, "\nscheduler: ", scheduler,
      "\niterations: 2\nwarmup: 1\ntimeline: false\nops:\n"
      "  - {id: fc1, type: ag_gemm, m: 128, k: 64, n: ",
      activation == "swiglu" ? 256 : 128,
      ", SCHEDULE}\n"
      "  - {id: fc2, type: gemm_rs, m: 128, k: 128, n: 64, SCHEDULE, input: fc1, activation: ",
      activation,
      "}\n"
      "  - {id: fc3, type: ag_gemm, m: 128, k: 64, n: 64, SCHEDULE, input: fc2}\n"
      "  - {id: wgrad, type: gemm, m: 128, k: 64, n: 64, parallel: row, input: fc3}\n"
      "  - {id: grads, type: all_reduce, m: 128, n: 64, input: wgrad}\n");
  return absl::StrReplaceAll(text, {{"SCHEDULE", schedule}});
}

// fp8: fc1 -> fc2 (a GEMM reading a GEMM's output), and a seeded
// row-parallel wgrad -> grads (an all_reduce reading the partial sums).
std::string Fp8Pairs(const std::string& mode) {
  std::string text = Chain("fp8", mode);
  text = text.substr(0, text.find("  - {id: fc3"));
  return absl::StrCat(text,
                      "  - {id: wgrad, type: gemm, m: 128, k: 64, n: 64, parallel: row}\n"
                      "  - {id: grads, type: all_reduce, m: 128, n: 64, input: wgrad}\n");
}

// A job's run as the tests read it: its result, the elementwise passes of
// the whole job, and those of the layer step's verified iteration (one
// iteration, enqueued: the passes between the progress report before it and
// its own).
struct EdgeRun {
  v1::JobResult result;
  int job_passes = 0;
  int verify_passes = -1;
};

EdgeRun RunChain(const std::string& text, int devices) {
  PassCounter engine(CheckedHostEngine(2));
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return {};
  EdgeRun run;
  int last = 0;
  RunHooks hooks;
  hooks.on_progress = [&](const Progress& p) {
    const int now = engine.passes.load();
    if (p.op_id == "layer" && p.phase == "verify") run.verify_passes = now - last;
    last = now;
  };
  std::vector<int> ranks;
  for (int d = 0; d < devices; ++d) ranks.push_back(d);
  absl::StatusOr<v1::JobResult> result = RunJobResult(engine, *spec, ranks, hooks, nullptr);
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return {};
  run.result = *result;
  run.job_passes = engine.passes.load();
  return run;
}

std::map<std::string, std::string> EdgesOf(const v1::JobResult& result) {
  std::map<std::string, std::string> edges;
  for (const v1::OpResult& op : result.ops()) edges[op.id()] = op.edge();
  return edges;
}

// Every chain the layer step checked came within its tolerance (the step
// fails the job otherwise: this says which), and there was one per reader.
void ExpectChainsVerified(const v1::JobResult& result, int chains = 4) {
  EXPECT_EQ(result.layer_chains_size(), chains);
  for (const v1::LayerChainCheck& check : result.layer_chains()) {
    EXPECT_LE(check.max_rel_error(), check.tolerance()) << check.chain();
  }
  for (const v1::OpResult& op : result.ops()) EXPECT_TRUE(op.verified()) << op.id();
}

// (mode, devices)
class LayerEdgeTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// Every edge without an activation in bf16 is an alias: the job launches no
// elementwise pass at all, times no activation pass, and every op still
// computes its chain's float64 result.
TEST_P(LayerEdgeTest, PlainEdgesAliasWithoutAPass) {
  const auto& [mode, devices] = GetParam();
  const EdgeRun run = RunChain(Chain("bf16", mode), devices);
  ASSERT_TRUE(run.result.has_layer_step());
  EXPECT_EQ(run.job_passes, 0);
  EXPECT_EQ(run.verify_passes, 0);
  EXPECT_EQ(run.result.layer_activation_ms(), 0);
  EXPECT_EQ(EdgesOf(run.result), (std::map<std::string, std::string>{{"fc1", ""},
                                                                     {"fc2", "alias"},
                                                                     {"fc3", "alias"},
                                                                     {"wgrad", "alias"},
                                                                     {"grads", "alias"}}));
  ExpectChainsVerified(run.result);
}

// SwiGLU between fc1 and fc2: one fused pass per rank an iteration, and the
// plain edges after it still alias.
TEST_P(LayerEdgeTest, ActivationIsOneFusedPassPerRank) {
  const auto& [mode, devices] = GetParam();
  const EdgeRun run = RunChain(Chain("bf16", mode, "swiglu"), devices);
  ASSERT_TRUE(run.result.has_layer_step());
  EXPECT_EQ(run.verify_passes, devices);
  EXPECT_GT(run.result.layer_activation_ms(), 0);
  const std::map<std::string, std::string> edges = EdgesOf(run.result);
  EXPECT_EQ(edges.at("fc2"), "fused swiglu");
  EXPECT_EQ(edges.at("fc3"), "alias");
  EXPECT_EQ(edges.at("grads"), "alias");
  ExpectChainsVerified(run.result);
}

// Into an fp8 GEMM input the pass quantizes with the chain's scale: a copy
// per rank; an all-reduce reads the bf16 partial sums it sums in place.
TEST_P(LayerEdgeTest, Fp8InputsAreCopiedAndReductionsAlias) {
  const auto& [mode, devices] = GetParam();
  const EdgeRun run = RunChain(Fp8Pairs(mode), devices);
  ASSERT_TRUE(run.result.has_layer_step());
  EXPECT_EQ(run.verify_passes, devices);
  EXPECT_EQ(EdgesOf(run.result),
            (std::map<std::string, std::string>{
                {"fc1", ""}, {"fc2", "copy"}, {"wgrad", ""}, {"grads", "alias"}}));
  ExpectChainsVerified(run.result, 2);
}

INSTANTIATE_TEST_SUITE_P(ModesAndRanks, LayerEdgeTest,
                         ::testing::Combine(::testing::Values("serial", "chunked"),
                                            ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param), "_tp",
                                               std::get<1>(info.param));
                         });

// Under scheduler: dynamic the deferred all-reduce runs on the deferred lane,
// chunk by chunk at run time, reading its producer's output in place.
TEST(LayerEdgeDynamicTest, DeferredLaneReadsTheAlias) {
  const EdgeRun run = RunChain(Chain("bf16", "chunked", "none", "dynamic"), 2);
  ASSERT_TRUE(run.result.has_layer_step());
  EXPECT_EQ(run.job_passes, 0);
  EXPECT_EQ(EdgesOf(run.result).at("grads"), "alias");
  ExpectChainsVerified(run.result);
}

// The rule itself, op by op.
PlannedOp Planned(const std::string& id, OpType type, int64_t k, int64_t n,
                  std::vector<int> devices = {0, 1}) {
  PlannedOp p;
  p.op.id = id;
  p.op.type = type;
  p.op.m = 128;
  p.op.k = k;
  p.op.n = n;
  p.devices = std::move(devices);
  return p;
}

TEST(EdgeForTest, AliasOnlyWhereTheBytesAgree) {
  const PlannedOp fc1 = Planned("fc1", OpType::kAgGemm, 64, 128);
  PlannedOp fc2 = Planned("fc2", OpType::kGemmRs, 128, 64);
  EXPECT_EQ(EdgeFor(fc2, 2, fc1, 2, DType::kBF16), Edge::kAlias);
  EXPECT_EQ(EdgeFor(fc2, 2, fc1, 2, DType::kF32), Edge::kAlias);
  // fp8: GEMMs write bf16 and read fp8 scaled by the chain's scale.
  EXPECT_EQ(EdgeFor(fc2, 2, fc1, 2, DType::kFP8), Edge::kCopy);
  // Split over another degree, the local shapes differ.
  EXPECT_EQ(EdgeFor(fc2, 1, fc1, 2, DType::kBF16), Edge::kCopy);
  // A device the producer has no rank on.
  PlannedOp elsewhere = Planned("fc2", OpType::kGemmRs, 128, 64, {2, 3});
  EXPECT_EQ(EdgeFor(elsewhere, 2, fc1, 2, DType::kBF16), Edge::kCopy);
  // A producer sent in pieces would write while the consumer reads.
  PlannedOp cut = fc1;
  cut.pieces = {ops::RowRange{0, 64}, ops::RowRange{64, 64}};
  EXPECT_EQ(EdgeFor(fc2, 2, cut, 2, DType::kBF16), Edge::kCopy);
  fc2.op.activation = Activation::kGelu;
  EXPECT_EQ(EdgeFor(fc2, 2, fc1, 2, DType::kBF16), Edge::kFused);
  EXPECT_EQ(EdgeName(Edge::kFused, Activation::kSwiglu), "fused swiglu");
  EXPECT_EQ(EdgeName(Edge::kAlias, Activation::kNone), "alias");
  EXPECT_EQ(EdgeName(Edge::kCopy, Activation::kNone), "copy");
  EXPECT_EQ(EdgeName(Edge::kSeeded, Activation::kNone), "");
}

TEST(EdgeForTest, AGeluEdgeRunsInTheProducersEpilogueWhereItsGemmWritesTheBytes) {
  PlannedOp fc1 = Planned("fc1", OpType::kAgGemm, 64, 128, {0});
  PlannedOp fc2 = Planned("fc2", OpType::kGemmRs, 128, 64, {0});
  fc2.op.activation = Activation::kGelu;
  EXPECT_TRUE(EpilogueFits(fc2, 1, fc1, 1, DType::kBF16));
  EXPECT_TRUE(EpilogueFits(fc2, 1, fc1, 1, DType::kF16));
  EXPECT_EQ(EdgeName(Edge::kEpilogue, Activation::kGelu), "epilogue gelu");
  // cuBLASLt's GELU_AUX: 16-bit types only; fp8 quantizes in its pass.
  EXPECT_FALSE(EpilogueFits(fc2, 1, fc1, 1, DType::kF32));
  EXPECT_FALSE(EpilogueFits(fc2, 1, fc1, 1, DType::kFP8));
  // No epilogue for SwiGLU (it halves the row), nor with no activation (an alias).
  PlannedOp gated = fc2;
  gated.op.activation = Activation::kSwiglu;
  EXPECT_FALSE(EpilogueFits(gated, 1, fc1, 1, DType::kBF16));
  PlannedOp plain = fc2;
  plain.op.activation = Activation::kNone;
  EXPECT_FALSE(EpilogueFits(plain, 1, fc1, 1, DType::kBF16));
  // Over two ranks an ag_gemm's output is gathered rows its GEMMs write piece
  // by piece, a gemm_rs's is reduced after its GEMM: the pass stays.
  const PlannedOp fc1_tp2 = Planned("fc1", OpType::kAgGemm, 64, 128);
  const PlannedOp fc2_tp2 = [&] {
    PlannedOp p = Planned("fc2", OpType::kGemmRs, 128, 64);
    p.op.activation = Activation::kGelu;
    return p;
  }();
  EXPECT_FALSE(EpilogueFits(fc2_tp2, 2, fc1_tp2, 2, DType::kBF16));
  // A gemm op writes its whole output with its GEMM on every rank: a column-
  // parallel one's share is a row-parallel one's input.
  const PlannedOp gemm_tp2 = Planned("fc1", OpType::kGemm, 64, 128);
  PlannedOp next_tp2 = Planned("fc2", OpType::kGemm, 128, 64);
  next_tp2.op.row_parallel = true;
  next_tp2.op.activation = Activation::kGelu;
  EXPECT_TRUE(EpilogueFits(next_tp2, 2, gemm_tp2, 2, DType::kBF16));
  // A collective alone has no GEMM; rows not of whole 16-byte units.
  const PlannedOp gather = Planned("fc1", OpType::kAllGather, 64, 128, {0});
  EXPECT_FALSE(EpilogueFits(fc2, 1, gather, 1, DType::kBF16));
  PlannedOp narrow = Planned("fc1", OpType::kAgGemm, 64, 12, {0});
  PlannedOp narrow_next = Planned("fc2", OpType::kGemmRs, 12, 64, {0});
  narrow_next.op.activation = Activation::kGelu;
  EXPECT_FALSE(EpilogueFits(narrow_next, 1, narrow, 1, DType::kBF16));
}

}  // namespace
}  // namespace overlap::runner
