// The planner's predictions beside a bench sweep's rows.
#include "client/bench/bench_prediction.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap::client {
namespace {

using ::testing::HasSubstr;

// Per rank 1024 x 512 x 1024 in 1 ms; a 2 MiB all-gather over NCCL 0.5 ms.
planner::Calibration Fixed() {
  planner::Calibration c;
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
  const std::vector<BenchPrediction> p = PredictBench(rows, &c, "bf16");
  ASSERT_EQ(p.size(), 3u);
  // GEMM 1 ms + gather 0.5 ms against 1.2 measured.
  ASSERT_TRUE(p[0].predicted);
  EXPECT_DOUBLE_EQ(p[0].step_ms, 1.5);
  EXPECT_DOUBLE_EQ(p[0].error, 0.25);
  EXPECT_TRUE(p[0].verified);
  // tp 4: the gather of 2 MiB at 4 ranks is 1.5x the 2-rank time.
  ASSERT_TRUE(p[1].predicted);
  EXPECT_DOUBLE_EQ(p[1].step_ms, 1.0 + 0.75);
  EXPECT_FALSE(p[1].verified);
  EXPECT_FALSE(p[2].predicted);
  EXPECT_THAT(p[2].cannot_say, HasSubstr("direct stores"));

  const std::string text = FormatBenchPredictions(rows, p);
  EXPECT_THAT(text, HasSubstr("+25.0%"));
  EXPECT_THAT(text, HasSubstr("no (tp > 2)"));
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
  EXPECT_FALSE(PredictBench(rows, nullptr, "bf16")[0].predicted);
}

}  // namespace
}  // namespace overlap::client
