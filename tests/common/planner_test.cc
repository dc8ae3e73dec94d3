// The planner's arithmetic on fixed calibrations, with exact expected values.
#include <cmath>

#include "common/graph_parser.h"
#include "common/planner/calibration.h"
#include "common/planner/calibration_fit.h"
#include "common/planner/planner.h"
#include "common/planner/two_lanes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap::planner {
namespace {

using ::testing::HasSubstr;
constexpr int64_t kMiB = int64_t{1} << 20;

// One GEMM shape per rank (1024 x 512 x 1024 in 1 ms, 2048 rows in 1.8 ms)
// and an all-gather over NCCL of 0.5 ms at 2 MiB, 2 ms at 8 MiB, 2 ranks.
Calibration Fixed() {
  Calibration c;
  c.identity = {"NVIDIA H200", "cuda", "13.0", "13.0", "2.28.3", "bf16"};
  c.gemms = {{1024, 512, 1024, 1.0}, {2048, 512, 1024, 1.8}};
  c.transfers = {{Collective::kAllGather, Transport::kNccl, 2, {{2 * kMiB, 0.5}, {8 * kMiB, 2.0}}},
                 {Collective::kAllGather, Transport::kP2p, 2, {{2 * kMiB, 0.25}, {8 * kMiB, 0.8}}}};
  c.gemm_slowdown = {{Transport::kNccl, 1.2}, {Transport::kP2p, 1.1}};
  return c;
}

OpShape AgGemm(int tp = 2) {
  OpShape op;
  op.type = OpType::kAgGemm;
  op.m = 1024;
  op.n = 512 * tp;
  op.k = 1024;
  op.tp = tp;
  return op;  // per rank 1024 x 512 x 1024; gathers 1024 x 1024 bf16 = 2 MiB
}

TEST(TwoLanesTest, AGemmBesideATransferRunsSlowerOnlyWhileItRuns) {
  // 1 ms transfer beside a 2 ms GEMM at 1.5x: 1/1.5 ms of GEMM done by 1 ms,
  // the other 4/3 ms alone.
  LaneTimes t = RunTwoLanes({{true, 1.0, {}}, {false, 2.0, {}}}, 1.5);
  EXPECT_DOUBLE_EQ(t.end_ms[0], 1.0);
  EXPECT_NEAR(t.end_ms[1], 7.0 / 3, 1e-12);
  EXPECT_NEAR(t.step_ms, 7.0 / 3, 1e-12);
}

TEST(TwoLanesTest, ATaskWaitsForItsDependencies) {
  // The GEMM waits for the transfer: serial, no slowdown.
  LaneTimes t = RunTwoLanes({{true, 1.0, {}}, {false, 2.0, {0}}}, 1.5);
  EXPECT_DOUBLE_EQ(t.start_ms[1], 1.0);
  EXPECT_DOUBLE_EQ(t.step_ms, 3.0);
}

TEST(CalibrationTest, GemmInterpolatesInMAndScalesByFlopsElsewhere) {
  const Calibration c = Fixed();
  EXPECT_DOUBLE_EQ(*GemmMs(c, 1536, 512, 1024), 1.4);   // between the points
  EXPECT_DOUBLE_EQ(*GemmMs(c, 512, 512, 1024), 0.5);    // below: proportional
  EXPECT_DOUBLE_EQ(*GemmMs(c, 4096, 512, 1024), 3.6);   // above: proportional
  EXPECT_DOUBLE_EQ(*GemmMs(c, 1024, 1024, 1024), 2.0);  // twice the columns
  Calibration empty;
  EXPECT_EQ(GemmMs(empty, 1, 1, 1).status().code(), absl::StatusCode::kNotFound);
}

TEST(CalibrationTest, TransfersInterpolateLogLogAndScaleByBusFactor) {
  const Calibration c = Fixed();
  // Halfway in log between 2 and 8 MiB: the geometric mean of the times.
  EXPECT_NEAR(*TransferMs(c, Collective::kAllGather, Transport::kNccl, 4 * kMiB, 2), 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(*TransferMs(c, Collective::kAllGather, Transport::kNccl, kMiB, 2), 0.5);
  EXPECT_DOUBLE_EQ(*TransferMs(c, Collective::kAllGather, Transport::kNccl, 16 * kMiB, 2), 4.0);
  // 4 ranks: (3/4) / (1/2) of the time at the same bus bandwidth.
  EXPECT_DOUBLE_EQ(*TransferMs(c, Collective::kAllGather, Transport::kNccl, 8 * kMiB, 4), 3.0);
  EXPECT_EQ(TransferMs(c, Collective::kAllReduce, Transport::kNccl, kMiB, 2).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(PredictTest, SerialIsGemmPlusTransfer) {
  CostModel model(Fixed(), {});
  auto p = PredictSchedule(model, AgGemm(), {OverlapMode::kSerial, 1, Transport::kNccl});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_DOUBLE_EQ(p->gemm_alone_ms, 1.0);
  EXPECT_DOUBLE_EQ(p->comm_alone_ms, 0.5);
  EXPECT_DOUBLE_EQ(p->step_ms, 1.5);
  EXPECT_DOUBLE_EQ(p->hidden, 0);
}

TEST(PredictTest, BulkHidesTheGatherBehindTheLocalShard) {
  CostModel model(Fixed(), {});
  auto p = PredictSchedule(model, AgGemm(), {OverlapMode::kBulk, 1, Transport::kNccl});
  ASSERT_TRUE(p.ok()) << p.status();
  // The local half (0.5 ms, 1.2x beside the 0.5 ms gather) ends at 0.5 +
  // (0.5 - 0.5/1.2) = 0.58333; the other half follows.
  EXPECT_NEAR(p->step_ms, 0.5 + (0.5 - 0.5 / 1.2) + 0.5, 1e-12);
  EXPECT_NEAR(p->hidden, 1 - (p->step_ms - 1.0) / 0.5, 1e-12);
  EXPECT_NEAR(p->piece.gemm_ms, 0.6, 1e-12);  // the local half beside the gather
  EXPECT_TRUE(p->piece.covered());
}

TEST(PredictTest, ChunkedPipelinesPiecesAndPaysTheGathersLatency) {
  CostModel model(Fixed(), {});
  auto p = PredictSchedule(model, AgGemm(), {OverlapMode::kChunked, 2, Transport::kNccl});
  ASSERT_TRUE(p.ok()) << p.status();
  // Each 1 MiB gather costs the 0.5 ms floor: gather 0, then gather 1 beside
  // GEMM 0 (0.5 ms at 1.2x), then GEMM 1.
  EXPECT_NEAR(p->step_ms, 1.0 + (0.5 - 0.5 / 1.2) + 0.5, 1e-12);
  EXPECT_EQ(p->pieces, 2);
}

TEST(PredictTest, CopyEnginesStreamAtTheBandwidthTheyReached) {
  CostModel model(Fixed(), {});
  // p2p all-gather: 8 MiB in 0.8 ms is its best bus bandwidth, 5.24 GB/s x
  // (1/2): a 2 MiB gather streams in 0.2 ms.
  auto copy = model.StreamMs(Collective::kAllGather, Transport::kP2p, 2 * kMiB, 2);
  ASSERT_TRUE(copy.ok());
  EXPECT_NEAR(*copy, 0.2, 1e-12);
  auto p = PredictSchedule(model, AgGemm(), {OverlapMode::kSerial, 1, Transport::kP2p});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->step_ms, 1.0 + 0.2, 1e-12);
}

TEST(PredictTest, WhatIfScalesTheLinkAndTheGemm) {
  WhatIf w;
  w.link_gbps = 2 * kMiB / 1e6;  // 1 MiB of bus traffic per ms
  CostModel model(Fixed(), w);
  // The measured 0.5 ms latency plus 1 MiB (half of 2 MiB) at 2 MiB/ms.
  EXPECT_NEAR(*model.TransferMs(Collective::kAllGather, Transport::kNccl, 2 * kMiB, 2), 1.0, 1e-12);
  WhatIf faster;
  // The calibration's best GEMM: 2 x 2048 x 512 x 1024 flop in 1.8 ms.
  const double best_tflops = 2.0 * 2048 * 512 * 1024 / (1.8 * 1e9);
  faster.gemm_tflops = 2 * best_tflops;
  CostModel twice(Fixed(), faster);
  EXPECT_NEAR(*twice.GemmMs(1024, 512, 1024), 0.5, 1e-12);
  EXPECT_THAT(twice.Assumptions()[1], HasSubstr("GEMM: every GEMM time scaled by 0.500"));
}

TEST(PredictTest, SaysWhatItCannotPredict) {
  CostModel model(Fixed(), {});
  auto direct = PredictSchedule(model, AgGemm(), {OverlapMode::kRing, 1, Transport::kDirect});
  EXPECT_EQ(direct.status().code(), absl::StatusCode::kUnimplemented);
  OpShape rs = AgGemm();
  rs.type = OpType::kGemmRs;  // no reduce_scatter curve
  auto none = PredictSchedule(model, rs, {OverlapMode::kSerial, 1, Transport::kNccl});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(none.status().message(), HasSubstr("no reduce_scatter over nccl"));
}

// A ring's pieces are tp x chunks, both from the user: past the bound the
// planner says so instead of laying out (or wrapping) billions of tasks.
TEST(PredictTest, PiecesPastTheBoundAreNotLaidOut) {
  CostModel model(Fixed(), {});
  OpShape op = AgGemm(65536);
  op.m = int64_t{1} << 40;
  auto ring = PredictSchedule(model, op, {OverlapMode::kRing, 1 << 30, Transport::kNccl});
  EXPECT_EQ(ring.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(ring.status().message(),
              HasSubstr("at most 65536 pieces (this schedule has 70368744177664)"));
  auto chunked =
      PredictSchedule(model, AgGemm(), {OverlapMode::kChunked, 1 << 17, Transport::kNccl});
  EXPECT_EQ(chunked.status().code(), absl::StatusCode::kUnimplemented);
  auto fits = PredictSchedule(model, AgGemm(), {OverlapMode::kRing, 4, Transport::kNccl});
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(fits->pieces, 8);
}

TEST(PlannerTest, AutoMeasuresSerialAndTheFastestThird) {
  CostModel model(Fixed(), {});
  OpSpec op;
  op.id = "qkv";
  op.type = OpType::kAgGemm;
  op.m = 1024;
  op.n = 1024;
  op.k = 1024;
  const std::vector<ops::Schedule> candidates = ops::CandidateSchedules(op, 2);
  ASSERT_GT(candidates.size(), 6u);
  OpPlan plan = PlanOp(model, op, 2, DType::kBF16, candidates);
  ASSERT_NE(plan.best(), nullptr);
  for (size_t i = 1; i < plan.predicted.size(); ++i) {
    EXPECT_LE(plan.predicted[i - 1].step_ms, plan.predicted[i].step_ms);
  }
  const std::vector<size_t> chosen = CandidatesToMeasure(plan, candidates);
  EXPECT_EQ(chosen.size(), candidates.size() / 3);
  EXPECT_EQ(candidates[chosen[0]].Name(), "serial/nccl");
  bool has_best = false;
  for (size_t i : chosen) has_best = has_best || candidates[i] == plan.best()->schedule;
  EXPECT_TRUE(has_best);
}

OpPlan Predicted(double step_ms) {
  OpPlan plan;
  SchedulePrediction p;
  p.step_ms = step_ms;
  plan.predicted.push_back(p);
  return plan;
}

TEST(PlannerTest, ALayerStepHidesDeferredGradientsBehindTheOpsAfterThem) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(R"(mesh: {tp: 1, dp: 2}
ops:
  - {id: wgrad, type: gemm, m: 64, k: 64, n: 64}
  - {id: grads, type: all_reduce, m: 64, n: 64, group: dp, after: [wgrad]}
  - {id: dgrad, type: gemm, m: 64, k: 64, n: 64, after: [wgrad]}
  - {id: loss, type: all_reduce, m: 8, n: 8, group: dp, after: [dgrad]}
  - {id: next, type: gemm, m: 64, k: 64, n: 64, after: [loss]}
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  // `loss` is waited for: it stays on the main lane. `grads` (1.5 ms) starts
  // after wgrad (1 ms) and runs to 2.5 beside dgrad, loss and next, which
  // run 1.2x slower meanwhile: dgrad ends at 2.2, loss at 2.32, next does
  // 0.15 ms of its work by 2.5 and the other 0.85 alone.
  const LayerEstimate layer = EstimateLayer(
      *spec, {Predicted(1.0), Predicted(1.5), Predicted(1.0), Predicted(0.1), Predicted(1.0)}, 1.2);
  EXPECT_EQ(layer.deferred, 1);
  EXPECT_DOUBLE_EQ(layer.compute_ms, 3.1);
  EXPECT_DOUBLE_EQ(layer.deferred_ms, 1.5);
  EXPECT_NEAR(layer.step_ms, 3.35, 1e-12);
  EXPECT_NEAR(layer.hidden, 1 - (layer.step_ms - 3.1) / 1.5, 1e-12);
  EXPECT_TRUE(layer.unpredicted.empty());
  const LayerEstimate blind =
      EstimateLayer(*spec, {Predicted(1.0), OpPlan(), Predicted(1.0), Predicted(0.1), Predicted(1.0)}, 1.2);
  EXPECT_EQ(blind.unpredicted, std::vector<std::string>{"grads"});
}

// What the planner puts beside the compute is what the layer step defers
// (DeferredCollectives): a gradient all-reduce over the tp group (a graph of
// one replica, `overlapctl graph --grads` at dp 1) as well as over dp.
TEST(PlannerTest, AGradientAllReduceOverTheTpGroupIsDeferredAsTheLayerStepDefersIt) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(R"(ops:
  - {id: wgrad, type: gemm, m: 64, k: 64, n: 64}
  - {id: grads, type: all_reduce, m: 64, n: 64, after: [wgrad]}
  - {id: dgrad, type: gemm, m: 64, k: 64, n: 64, after: [wgrad]}
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const LayerEstimate layer =
      EstimateLayer(*spec, {Predicted(1.0), Predicted(0.5), Predicted(1.0)}, 1.0);
  EXPECT_EQ(layer.deferred, 1);
  EXPECT_DOUBLE_EQ(layer.deferred_ms, 0.5);
  EXPECT_DOUBLE_EQ(layer.compute_ms, 2.0);
  EXPECT_DOUBLE_EQ(layer.step_ms, 2.0) << "the all-reduce hides behind dgrad";
}

TEST(PlannerTest, NodesSpannedFollowsTheMesh) {
  const Mesh mesh{2, 2};  // tp 2 x dp 2, two devices per node
  EXPECT_EQ(NodesSpanned(mesh, OpGroup::kTp, 4, 2), 1);
  EXPECT_EQ(NodesSpanned(mesh, OpGroup::kDp, 4, 2), 2);
  EXPECT_EQ(NodesSpanned(mesh, OpGroup::kWorld, 4, 2), 2);
  EXPECT_EQ(NodesSpanned(mesh, OpGroup::kDp, 4, 4), 1);  // one node holds all
}

TEST(CalibrationJsonTest, RoundTripsAndRefusesOtherHardwareByName) {
  Calibration c = Fixed();
  c.piece_overhead_ms = 0.004;
  c.inter_node = InterNodeLink{45.5, 0.05, 2};
  auto back = CalibrationFromJson(CalibrationToJson(c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(CalibrationToJson(*back), CalibrationToJson(c));
  EXPECT_DOUBLE_EQ(back->gemm_slowdown.at(Transport::kP2p), 1.1);

  CalibrationIdentity h100 = c.identity;
  h100.device = "NVIDIA H100 80GB HBM3";
  absl::Status other = CheckCalibrationMatches(c, h100);
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.message(), HasSubstr("GPU 'NVIDIA H200'"));
  CalibrationIdentity nccl = c.identity;
  nccl.nccl = "2.27.1";
  EXPECT_THAT(CheckCalibrationMatches(c, nccl).message(), HasSubstr("NCCL '2.28.3'"));
  EXPECT_TRUE(CheckCalibrationMatches(c, c.identity).ok());

  EXPECT_EQ(CalibrationFromJson("[1]").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(CalibrationFromJson(R"({"version": 9, "identity": {}})").status().message(),
              HasSubstr("version 9"));
  EXPECT_THAT(
      CalibrationFromJson(R"({"version": 1, "identity": {}, "gemm_slowdown": {"nccl": 0.5}})")
          .status()
          .message(),
      HasSubstr("between 1 and 10"));
}

TEST(FitTest, FitsCurvesGemmsAndSlowdownsAndRefusesMixedHardware) {
  nlohmann::json comm = {{"gpus", {"NVIDIA H200", "NVIDIA H200"}}, {"backend", "cuda"},
                         {"nccl", "2.28.3"}, {"tp", 2}, {"dtype", "bf16"},
                         {"rows", {{{"collective", "all_gather"}, {"bytes", 2 * kMiB},
                                    {"transports", {{"nccl", {{"ms", 0.5}, {"verified", true}}},
                                                    {"p2p", {{"ms", 0.25}, {"verified", true}}}}}}}}};
  nlohmann::json bench = {{"gpus", {"NVIDIA H200", "NVIDIA H200"}}, {"backend", "cuda"},
                          {"nccl", "2.28.3"}, {"dtype", "bf16"},
                          {"rows", {{{"op", "ag_gemm"}, {"m", 1024}, {"k", 1024}, {"n", 1024},
                                     {"tp", 2}, {"gemm_alone_ms", 1.0}, {"auto_mode", "bulk/p2p"},
                                     {"gemm_slowdown", 1.25}, {"comm_alone_nccl_ms", 0.6},
                                     {"comm_alone_p2p_ms", 0.3}}}}};
  auto c = FitCalibration({comm, bench}, {"comm.json", "bench.json"}, {});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->gemms.size(), 1u);
  EXPECT_EQ(c->gemms[0].n, 512);  // the rank's GEMM: n / tp
  EXPECT_DOUBLE_EQ(c->gemm_slowdown.at(Transport::kP2p), 1.25);
  const TransferCurve* nccl = c->Curve(Collective::kAllGather, Transport::kNccl);
  ASSERT_NE(nccl, nullptr);
  ASSERT_EQ(nccl->points.size(), 1u);  // the bench's 2 MiB gather joins commbench's
  EXPECT_DOUBLE_EQ(nccl->points[0].ms, 0.55);

  nlohmann::json h100 = bench;
  h100["gpus"] = {"NVIDIA H100 80GB HBM3"};
  auto mixed = FitCalibration({comm, h100}, {"comm.json", "h100.json"}, {});
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(mixed.status().message(), HasSubstr("h100.json"));
  EXPECT_EQ(FitCalibration({nlohmann::json{{"x", 1}}}, {"x.json"}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FitTest, FitsThePieceCostToTheLeadingCandidatesTimings) {
  // What a 3 us piece cost gives chunked/2 on the fixed calibration.
  Calibration truth = Fixed();
  truth.piece_overhead_ms = 0.003;
  const double chunked =
      PredictSchedule(CostModel(truth, {}), AgGemm(), {OverlapMode::kChunked, 2, Transport::kNccl})
          ->step_ms;
  nlohmann::json comm = {{"gpus", {"NVIDIA H200"}}, {"tp", 2}, {"dtype", "bf16"},
                         {"rows", {{{"collective", "all_gather"}, {"bytes", 2 * kMiB},
                                    {"transports", {{"nccl", {{"ms", 0.5}}}}}},
                                   {{"collective", "all_gather"}, {"bytes", 8 * kMiB},
                                    {"transports", {{"nccl", {{"ms", 2.0}}}}}}}}};
  nlohmann::json bench = {
      {"gpus", {"NVIDIA H200"}}, {"dtype", "bf16"},
      {"rows", {{{"op", "ag_gemm"}, {"m", 1024}, {"k", 1024}, {"n", 1024}, {"tp", 2},
                 {"gemm_alone_ms", 1.0}, {"auto_mode", "serial/nccl"},
                 {"candidates", {{{"schedule", "serial/nccl"}, {"best_ms", 1.5}},
                                 {{"schedule", "chunked/2/nccl"}, {"best_ms", chunked}},
                                 // far behind the leaders: left out of the fit
                                 {{"schedule", "chunked/16/nccl"}, {"best_ms", 30.0}}}}}}}};
  FitOptions options;
  options.gemm_slowdown[Transport::kNccl] = 1.2;
  auto c = FitCalibration({comm, bench}, {"comm.json", "bench.json"}, options);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->piece_overhead_ms, 0.003);
  EXPECT_THAT(c->sources.back(), HasSubstr("fitted to 1 bench row(s)"));
}

TEST(ScheduleNameTest, ParsesWhatNameWrites) {
  for (const char* name : {"serial/nccl", "ring/p2p", "ring/2/p2p", "chunked/16/nccl",
                           "bulk/p2p", "serial/p2p/ps", "serial"}) {
    auto s = ops::ParseScheduleName(name);
    ASSERT_TRUE(s.ok()) << name;
    EXPECT_EQ(s->Name(), name);
  }
  EXPECT_EQ(ops::ParseScheduleName("ring/p2p+graph")->Name(), "ring/p2p");
  for (const char* bad : {"auto/nccl", "ring/0/p2p", "ring/two/p2p", "bulk/nccl/x/y", ""}) {
    EXPECT_FALSE(ops::ParseScheduleName(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace overlap::planner
