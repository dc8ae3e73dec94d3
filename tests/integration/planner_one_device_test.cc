// The planner on a one-device daemon (host backend): `calibrate` keeps what
// one rank can measure (the GEMMs) and names what it cannot (no transfer
// curve), `plan` predicts a tp 1 graph and says why it cannot predict tp 2,
// and `bench` prints its tp 1 predictions beside the measured steps.
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/harness.h"

namespace overlap::testing {
namespace {

using ::testing::HasSubstr;

TEST(PlannerOneDeviceTest, CalibratesPlansAndBenchesTp1AndSaysWhyNotTp2) {
  TempDir dir;
  Daemon daemon(dir.path(), {"--host-devices", "1"});
  ASSERT_TRUE(daemon.Start());
  const std::string graph = dir.File("layer.yaml");
  RunResult made = daemon.Ctl({"graph", "--hidden", "256", "--ffn", "512", "--heads", "4", "--seq",
                               "128", "--tp", "1", "--output-file", graph});
  ASSERT_EQ(made.exit_code, 0) << Describe(made);

  RunResult calibrate = daemon.Ctl({"calibrate", "--shapes", "ag_gemm:512x256x256", "--json"},
                                   std::chrono::seconds(240));
  ASSERT_EQ(calibrate.exit_code, 0) << Describe(calibrate) << daemon.Log();
  const nlohmann::json c = nlohmann::json::parse(calibrate.out);
  EXPECT_FALSE(c["gemm"].empty()) << calibrate.out;
  EXPECT_TRUE(c["transfers"].empty()) << calibrate.out;
  EXPECT_THAT(calibrate.err, HasSubstr("step 1 of 2 skipped: one rank"));
  EXPECT_THAT(calibrate.err, HasSubstr("kept by the daemon"));
  // The summary names what is missing.
  const std::string kept = dir.File("kept.json");
  std::ofstream(kept) << calibrate.out;
  RunResult summary = daemon.Ctl({"calibrate", "--load", kept});
  ASSERT_EQ(summary.exit_code, 0) << Describe(summary);
  EXPECT_THAT(summary.out, HasSubstr("no transfer curve"));
  EXPECT_THAT(summary.out, HasSubstr("calibrate on 2+ devices"));

  RunResult plan = daemon.Ctl({"plan", graph, "--json"});
  ASSERT_EQ(plan.exit_code, 0) << Describe(plan);
  const nlohmann::json p = nlohmann::json::parse(plan.out);
  ASSERT_FALSE(p["ops"].empty());
  for (const nlohmann::json& op : p["ops"]) {
    EXPECT_EQ(op["tp"], 1) << op.dump();
    ASSERT_EQ(op["candidates"].size(), 1u) << op.dump();
    EXPECT_TRUE(op["cannot_say"].empty()) << op.dump();
    const std::string type = op["type"];
    if (type != "all_gather" && type != "reduce_scatter" && type != "all_reduce") {
      EXPECT_GT(op["candidates"][0]["step_ms"].get<double>(), 0) << op.dump();
    }
    EXPECT_EQ(op["candidates"][0]["comm_alone_ms"].get<double>(), 0) << op.dump();
  }
  EXPECT_GT(p["best_ms"].get<double>(), 0);
  RunResult text = daemon.Ctl({"plan", graph});
  ASSERT_EQ(text.exit_code, 0) << Describe(text);
  EXPECT_THAT(text.out, HasSubstr("one rank: no collective"));
  EXPECT_THAT(text.out, HasSubstr("only tp 1 is predicted"));

  RunResult tp2 = daemon.Ctl({"plan", graph, "--what-if", "tp=2"});
  ASSERT_EQ(tp2.exit_code, 0) << Describe(tp2);
  EXPECT_THAT(tp2.out, HasSubstr("cannot say: the calibration has no transfer curve"));
  EXPECT_THAT(tp2.out, HasSubstr("tp > 1 needs a transfer curve: calibrate on 2+ devices"));

  RunResult bench = daemon.Ctl({"bench", "--shapes", "ag_gemm:512x256x256", "--repeats", "1"},
                               std::chrono::seconds(240));
  ASSERT_EQ(bench.exit_code, 0) << Describe(bench) << daemon.Log();
  EXPECT_THAT(bench.out, HasSubstr("predicted (the planner"));
  EXPECT_THAT(bench.out, ::testing::Not(HasSubstr("predictions: none")));
  EXPECT_THAT(bench.out, HasSubstr("tp > 1 is not predicted: the calibration has no transfer"));
}

}  // namespace
}  // namespace overlap::testing
