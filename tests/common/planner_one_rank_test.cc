// A calibration measured on one device: it keeps the GEMMs, holds no transfer
// curve (one rank moves nothing) and says so, predicts tp 1 (the GEMM alone,
// a collective costing 0) and names why it cannot predict tp 2.
#include "common/planner/calibration.h"
#include "common/planner/calibration_fit.h"
#include "common/planner/planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap::planner {
namespace {

using ::testing::HasSubstr;
constexpr int64_t kMiB = int64_t{1} << 20;

// What `calibrate` measures on one device: commbench at tp 1 (local copies)
// and a bench row at tp 1.
std::vector<nlohmann::json> OneDeviceResults() {
  nlohmann::json comm = {{"gpus", {"NVIDIA H200"}},
                         {"backend", "cuda"},
                         {"nccl", "2.28.3"},
                         {"tp", 1},
                         {"dtype", "bf16"},
                         {"rows",
                          {{{"collective", "all_gather"},
                            {"bytes", 2 * kMiB},
                            {"transports", {{"nccl", {{"ms", 0.02}, {"verified", true}}}}}}}}};
  nlohmann::json bench = {{"gpus", {"NVIDIA H200"}},
                          {"backend", "cuda"},
                          {"nccl", "2.28.3"},
                          {"dtype", "bf16"},
                          {"rows",
                           {{{"op", "ag_gemm"},
                             {"m", 1024},
                             {"k", 1024},
                             {"n", 512},
                             {"tp", 1},
                             {"gemm_alone_ms", 1.0},
                             {"auto_mode", "serial/1/nccl"},
                             {"comm_alone_nccl_ms", 0.02}}}}};
  return {comm, bench};
}

TEST(OneRankCalibrationTest, KeepsTheGemmsAndNamesTheMissingTransferCurve) {
  auto c = FitCalibration(OneDeviceResults(), {"comm.json", "bench.json"}, {});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->gemms.size(), 1u);
  EXPECT_EQ(c->gemms[0].n, 512);
  EXPECT_DOUBLE_EQ(c->gemms[0].ms, 1.0);
  EXPECT_TRUE(c->transfers.empty());
  EXPECT_THAT(TransferGap(*c), HasSubstr("no transfer curve"));
  EXPECT_THAT(TransferGap(*c), HasSubstr("calibrate on 2+ devices"));
  bool noted = false;
  for (const std::string& s : c->sources) noted = noted || s.find("one rank") != std::string::npos;
  EXPECT_TRUE(noted);
  // What the daemon stores it as reads back (a curve of one rank was refused there).
  auto back = CalibrationFromJson(CalibrationToJson(*c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->transfers.empty());
  // A calibration with a curve has no gap.
  Calibration two = *c;
  two.transfers = {{Collective::kAllGather, Transport::kNccl, 2, {{2 * kMiB, 0.5}}}};
  EXPECT_EQ(TransferGap(two), "");
}

TEST(OneRankCalibrationTest, PredictsTp1AndSaysWhyNotTp2) {
  auto c = FitCalibration(OneDeviceResults(), {"comm.json", "bench.json"}, {});
  ASSERT_TRUE(c.ok()) << c.status();
  const CostModel model(*c, {});
  OpSpec op;
  op.id = "fc1";
  op.type = OpType::kAgGemm;
  op.m = 1024;
  op.k = 1024;
  op.n = 512;
  const std::vector<ops::Schedule> one = {{OverlapMode::kSerial, 1, Transport::kNccl}};
  const OpPlan at1 = PlanOp(model, op, 1, DType::kBF16, one);
  ASSERT_NE(at1.best(), nullptr);
  EXPECT_DOUBLE_EQ(at1.best()->step_ms, 1.0);  // the GEMM alone, as measured
  EXPECT_DOUBLE_EQ(at1.best()->comm_alone_ms, 0.0);
  EXPECT_TRUE(at1.unpredicted.empty());

  // A collective alone over one rank costs nothing, with no curve.
  OpSpec grads = op;
  grads.type = OpType::kAllReduce;
  grads.k = 0;
  const OpPlan ar1 = PlanOp(model, grads, 1, DType::kBF16, one);
  ASSERT_NE(ar1.best(), nullptr);
  EXPECT_DOUBLE_EQ(ar1.best()->step_ms, 0.0);

  op.n = 1024;  // the same per-rank GEMM at tp 2
  const std::vector<ops::Schedule> two = {{OverlapMode::kSerial, 1, Transport::kNccl},
                                          {OverlapMode::kBulk, 1, Transport::kP2p}};
  const OpPlan at2 = PlanOp(model, op, 2, DType::kBF16, two);
  EXPECT_EQ(at2.best(), nullptr);
  ASSERT_EQ(at2.unpredicted.size(), 2u);
  for (const CandidateVerdict& v : at2.unpredicted) {
    EXPECT_THAT(v.cannot_say, HasSubstr("no transfer curve")) << v.schedule.Name();
    EXPECT_THAT(v.cannot_say, HasSubstr("tp > 1 needs a transfer curve: calibrate on 2+ devices"));
  }
  bool said = false;
  for (const std::string& a : model.Assumptions()) {
    said = said || a.find("only tp 1 is predicted") != std::string::npos;
  }
  EXPECT_TRUE(said);
}

}  // namespace
}  // namespace overlap::planner
