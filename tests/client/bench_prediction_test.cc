// The planner's predictions beside a bench sweep's rows.
#include "client/measure/bench_prediction.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap::client {
namespace {

using ::testing::HasSubstr;

// Per rank 1024 x 512 x 1024 in 1 ms; a 2 MiB all-gather over NCCL 0.5 ms.
planner::Calibration Fixed() {
  planner::Calibration c;
  c.identity.device = "NVIDIA H200";
  c.gemms = {{1024, 512, 1024, 1.0}};
  c.transfers = {{Collective::kAllGather, Transport::kNccl, 2, {{2 << 20, 0.5}, {8 << 20, 2.0}}}};
  return c;
}

BenchRow Row(int tp, const std::string& mode, double step_ms) {
  BenchRow r;
  r.shape = {"ag_gemm", 1024, 1024, 512 * tp};
  r.tp = tp;
  r.mode = mode;
  r.step_ms = step_ms;
  return r;
}

TEST(BenchPredictionTest, PredictsAutosChoiceAndMarksWhatWasNeverChecked) {
  const planner::Calibration c = Fixed();
  const std::vector<BenchRow> rows = {Row(2, "serial/nccl+graph", 1.2), Row(4, "serial/nccl", 2.0),
                                      Row(2, "ring/direct", 1.0)};
  const std::vector<BenchPrediction> p = PredictBench(rows, &c, "bf16", "NVIDIA H200");
  ASSERT_EQ(p.size(), 3u);
  // GEMM 1 ms + gather 0.5 ms against 1.2 measured.
  ASSERT_TRUE(p[0].predicted);
  EXPECT_DOUBLE_EQ(p[0].step_ms, 1.5);
  EXPECT_DOUBLE_EQ(p[0].error, 0.25);
  EXPECT_TRUE(p[0].verified);
  EXPECT_EQ(p[0].judged_in, "docs/results/planner-replay-h200x2-2026-12-06.txt");
  // tp 4: the gather of 2 MiB at 4 ranks is 1.5x the 2-rank time.
  ASSERT_TRUE(p[1].predicted);
  EXPECT_DOUBLE_EQ(p[1].step_ms, 1.0 + 0.75);
  EXPECT_FALSE(p[1].verified);
  EXPECT_FALSE(p[2].predicted);
  EXPECT_THAT(p[2].cannot_say, HasSubstr("direct stores"));

  const std::string text = FormatBenchPredictions(rows, p);
  EXPECT_THAT(text, HasSubstr("+25.0%"));
  EXPECT_THAT(text, HasSubstr("no (no recorded judge for NVIDIA H200 at tp 4 over nccl)"));
  EXPECT_THAT(text, HasSubstr("cannot say"));
  EXPECT_THAT(text, HasSubstr("median absolute error 18.8% over 2 shape(s)"));
  EXPECT_THAT(text, HasSubstr("unverified"));

  nlohmann::json j = {{"rows", {nlohmann::json::object(), nlohmann::json::object(),
                                nlohmann::json::object()}}};
  AddPredictionsJson(p, j);
  EXPECT_DOUBLE_EQ(j["rows"][0]["predicted_step_ms"].get<double>(), 1.5);
  EXPECT_FALSE(j["rows"][1]["prediction_verified"].get<bool>());
  EXPECT_TRUE(j["rows"][2].contains("prediction_cannot_say"));
  // No calibration: nothing predicted.
  EXPECT_FALSE(PredictBench(rows, nullptr, "bf16", "NVIDIA H200")[0].predicted);
}

// "verified" only where a recorded judge scored that GPU model, tp and
// transport: the same tp 2 row on another GPU, over a transport the replay did
// not run, from another GPU's calibration, on shared GPUs or the host backend
// is unverified, each with its reason.
TEST(BenchPredictionTest, VerifiedOnlyWhereARecordedJudgeScoredThatGpuTpAndTransport) {
  planner::Calibration c = Fixed();
  c.transfers.push_back(
      {Collective::kAllGather, Transport::kP2p, 2, {{2 << 20, 0.4}, {8 << 20, 1.6}}});
  const std::vector<BenchRow> rows = {Row(2, "serial/nccl", 1.5), Row(2, "serial/p2p", 1.4)};
  for (const auto& [gpu, verified] : std::vector<std::pair<std::string, bool>>{
           {"NVIDIA H200", true}, {"NVIDIA H100 80GB HBM3", false}, {"NVIDIA H200 NVL", false}}) {
    SCOPED_TRACE(gpu);
    c.identity.device = gpu;
    for (const BenchPrediction& p : PredictBench(rows, &c, "bf16", gpu)) {
      ASSERT_TRUE(p.predicted);
      EXPECT_EQ(p.verified, verified);
      if (!verified) {
        EXPECT_THAT(p.unverified_why, HasSubstr("no recorded judge for " + gpu + " at tp 2"));
      }
    }
  }
  c.identity.device = "NVIDIA H100 80GB HBM3";
  EXPECT_EQ(PredictBench(rows, &c, "bf16", "NVIDIA H200")[0].unverified_why,
            "calibrated on NVIDIA H100 80GB HBM3, measured on NVIDIA H200");
  c.identity.device = "NVIDIA H200";
  std::vector<BenchRow> shared = rows;
  shared[0].ranks_per_gpu = 2;
  shared[1].host_backend = true;
  const std::vector<BenchPrediction> p = PredictBench(shared, &c, "bf16", "NVIDIA H200");
  EXPECT_EQ(std::pair(p[0].verified, p[0].unverified_why),
            std::pair(false, std::string("ranks share a GPU")));
  EXPECT_EQ(std::pair(p[1].verified, p[1].unverified_why),
            std::pair(false, std::string("host backend")));

  // Every judge's file is kept, and it is of that GPU at that tp over that transport.
  for (const JudgedPredictions& judged : JudgedPredictionTable()) {
    std::ifstream in(std::string(OVERLAP_SOURCE_DIR) + "/" + judged.judged_in);
    ASSERT_TRUE(in) << judged.judged_in;
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_THAT(text.str(), HasSubstr("calibration of " + judged.gpu + " (cuda)"));
    EXPECT_THAT(text.str(), HasSubstr(absl::StrCat("all_gather ", TransportName(judged.transport),
                                                   " 6 size(s) at ", judged.tp, " ranks")));
    EXPECT_THAT(text.str(), HasSubstr("/" + TransportName(judged.transport)));
  }
}

}  // namespace
}  // namespace overlap::client
