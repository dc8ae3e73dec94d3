// `overlapctl calibrate` and `plan` against the real overlapd on the host
// backend (calibration must work there; its figures are not asserted), the
// calibration's refusals, and the replay script's judge on a small fixture
// of a recorded two-GPU sweep.
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

const std::string kData = std::string(OVERLAP_SOURCE_DIR) + "/tests/data/planner/";

std::string SmallGraph(Daemon& daemon, TempDir& dir) {
  const std::string file = dir.File("layer.yaml");
  RunResult graph = daemon.Ctl({"graph", "--hidden", "256", "--ffn", "512", "--heads", "4", "--seq",
                                "128", "--tp", "4", "--output-file", file});
  EXPECT_EQ(graph.exit_code, 0) << Describe(graph);
  return file;
}

TEST(PlannerCliTest, CalibratesOnTheHostBackendAndPlansFromWhatTheDaemonKept) {
  TempDir dir;
  Daemon daemon(dir.path());
  ASSERT_TRUE(daemon.Start());
  const std::string graph = SmallGraph(daemon, dir);
  // Nothing kept yet: plan says how to make a calibration.
  RunResult none = daemon.Ctl({"plan", graph});
  EXPECT_EQ(none.exit_code, 3) << Describe(none);
  EXPECT_THAT(none.err, HasSubstr("NOT_FOUND"));
  EXPECT_THAT(none.err, HasSubstr("overlapctl calibrate"));

  RunResult calibrate = daemon.Ctl({"calibrate", "--shapes", "ag_gemm:512x256x256", "--json"},
                                   std::chrono::seconds(240));
  ASSERT_EQ(calibrate.exit_code, 0) << Describe(calibrate) << daemon.Log();
  const nlohmann::json c = nlohmann::json::parse(calibrate.out);
  EXPECT_EQ(c["identity"]["backend"], "host");
  EXPECT_FALSE(c["gemm"].empty());
  EXPECT_EQ(c["transfers"].size(), 6u);  // 3 collectives x nccl, p2p
  EXPECT_THAT(calibrate.err, HasSubstr("step 2 of 2"));
  EXPECT_THAT(calibrate.err, HasSubstr("kept by the daemon"));

  RunResult plan = daemon.Ctl({"plan", graph, "--json"});
  ASSERT_EQ(plan.exit_code, 0) << Describe(plan);
  const nlohmann::json p = nlohmann::json::parse(plan.out);
  ASSERT_EQ(p["ops"].size(), 4u);
  for (const nlohmann::json& op : p["ops"]) {
    EXPECT_EQ(op["tp"], 4) << op.dump();
    ASSERT_FALSE(op["candidates"].empty()) << op.dump();
    EXPECT_EQ(op["best"], op["candidates"][0]["schedule"]);
    double last = 0;
    for (const nlohmann::json& cand : op["candidates"]) {
      EXPECT_GE(cand["step_ms"].get<double>(), last);  // fastest first
      last = cand["step_ms"].get<double>();
    }
  }
  // auto asks the planner which candidates to time, and says so.
  RunResult submit = daemon.Ctl({"submit", graph, "--wait", "--json"}, std::chrono::seconds(240));
  ASSERT_EQ(submit.exit_code, 0) << Describe(submit) << daemon.Log();
  const nlohmann::json job = nlohmann::json::parse(submit.out);
  EXPECT_EQ(job["state"], "SUCCEEDED");
  int planned = 0;
  for (const nlohmann::json& op : job["result"]["ops"]) {
    EXPECT_TRUE(op["verified"].get<bool>()) << op.dump();
    if (op["auto_reason"].get<std::string>().find("the planner chose") != std::string::npos) {
      ++planned;
    }
  }
  EXPECT_GT(planned, 0) << job["result"]["ops"].dump();
  // The choices auto made, exported for TransformerEngine with their margins.
  RunResult te = daemon.Ctl({"export", "--format", "te", "--job", job["id"].get<std::string>()});
  ASSERT_EQ(te.exit_code, 0) << Describe(te);
  const nlohmann::json exported = nlohmann::json::parse(te.out);
  EXPECT_TRUE(exported["ub_cfgs"].is_object());
  EXPECT_EQ(exported["overlapd"].size() + exported["not_exported"].size(), 4u) << te.out;
  RunResult bad_format = daemon.Ctl({"export", "--format", "deepspeed", "--job", "job-000001"});
  EXPECT_EQ(bad_format.exit_code, 64) << Describe(bad_format);
  RunResult unknown = daemon.Ctl({"export", "--format", "te", "--job", "job-999999"});
  EXPECT_EQ(unknown.exit_code, 3) << Describe(unknown);
  EXPECT_THAT(unknown.err, HasSubstr("NOT_FOUND"));
  // A what-if states its assumption; one the model cannot parse is refused.
  RunResult what_if = daemon.Ctl({"plan", graph, "--what-if", "tp=8,nvlink-gbps=400"});
  ASSERT_EQ(what_if.exit_code, 0) << Describe(what_if);
  EXPECT_THAT(what_if.out, HasSubstr("tp 8: transfers were measured at 4 ranks"));
  EXPECT_THAT(what_if.out, HasSubstr("within a node: every transport at 400 GB/s"));
  RunResult bad = daemon.Ctl({"plan", graph, "--what-if", "tp=two"});
  EXPECT_EQ(bad.exit_code, 64) << Describe(bad);
  EXPECT_THAT(bad.err, HasSubstr("--what-if 'tp=two'"));
}

TEST(PlannerCliTest, ACalibrationFromOtherHardwareIsRefusedByName) {
  TempDir dir;
  Daemon daemon(dir.path());
  ASSERT_TRUE(daemon.Start());
  RunResult store = daemon.Ctl({"calibrate", "--from", kData + "commbench.json",
                                kData + "gemm.json", "--store"});
  EXPECT_EQ(store.exit_code, 3) << Describe(store);
  EXPECT_THAT(store.err, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_THAT(store.err, HasSubstr("GPU 'NVIDIA H200'"));
  // Results that are not bench or commbench output.
  const std::string junk = dir.File("junk.json");
  std::ofstream(junk) << R"({"rows": [{"x": 1}]})";
  RunResult bad = daemon.Ctl({"calibrate", "--from", junk});
  EXPECT_EQ(bad.exit_code, 64) << Describe(bad);
  EXPECT_THAT(bad.err, HasSubstr("not a result of bench, commbench"));
}

// A directory or a device where a result file belongs is refused by name with
// the usage status: plan --replay DIR and calibrate --from DIR aborted on an
// uncaught std::ios_failure (exit 134).
TEST(PlannerCliTest, ADirectoryOrADeviceForAResultFileIsRefusedByName) {
  TempDir dir;
  const std::string calibration = dir.File("calibration.json");
  RunResult fit = Overlapctl(dir.path(), "",
                             {"calibrate", "--from", kData + "commbench.json", kData + "gemm.json",
                              "--output-file", calibration});
  ASSERT_EQ(fit.exit_code, 0) << Describe(fit);
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {{"plan", "--calibration", calibration, "--replay", dir.path()},
            "cannot read " + dir.path() + ": it is a directory"},
           {{"calibrate", "--from", dir.path()},
            "cannot read " + dir.path() + ": it is a directory"},
           {{"calibrate", "--from", kData + "commbench.json", dir.path()},
            "cannot read " + dir.path() + ": it is a directory"},
           {{"plan", "--calibration", dir.path(), "--replay", kData + "bench-run.json"},
            "cannot read " + dir.path() + ": it is a directory"},
           {{"plan", "--calibration", calibration, "--replay", "/dev/zero"},
            "cannot read /dev/zero: larger than 64 MiB"},
           {{"calibrate", "--from", "/dev/zero"}, "cannot read /dev/zero: larger than 64 MiB"},
       }) {
    SCOPED_TRACE(c.args[0] + " " + c.args[2]);
    RunResult refused = Overlapctl(dir.path(), "", c.args);
    EXPECT_EQ(refused.exit_code, 64) << Describe(refused);
    EXPECT_THAT(refused.err, HasSubstr(c.says));
  }
}

TEST(PlannerCliTest, TheReplayJudgeScoresAFixtureOfARecordedSweep) {
  TempDir dir;
  const std::string calibration = dir.File("calibration.json");
  RunResult fit = Overlapctl(
      dir.path(), "",
      {"calibrate", "--from", kData + "commbench.json", kData + "gemm.json", "--gemm-slowdown",
       "nccl=1.2,p2p=1.106", "--piece-overhead-ms", "0.004", "--output-file", calibration});
  ASSERT_EQ(fit.exit_code, 0) << Describe(fit);
  EXPECT_THAT(fit.out, HasSubstr("GEMM 1.106x beside p2p"));
  RunResult replay = Overlapctl(dir.path(), "",
                                {"plan", "--calibration", calibration, "--replay",
                                 kData + "bench-run.json"});
  ASSERT_EQ(replay.exit_code, 0) << Describe(replay);
  // A file that is not what bench writes is refused by name, not crashed on: a
  // float for a shape would overflow a conversion to an integer.
  for (const std::string& bad :
       {std::string(R"({"rows": [{"op": "ag_gemm", "m": 4e97, "k": 8, "n": 8}]})"),
        std::string(R"({"rows": [{"op": 3, "m": 8, "k": 8, "n": 8}]})"),
        std::string(R"({"rows": 7})"), std::string(R"({"dtype": 1, "rows": []})")}) {
    SCOPED_TRACE(bad);
    std::ofstream(dir.File("bad.json")) << bad;
    RunResult refused = Overlapctl(
        dir.path(), "", {"plan", "--calibration", calibration, "--replay", dir.File("bad.json")});
    EXPECT_EQ(refused.exit_code, 64) << Describe(refused);
    EXPECT_THAT(refused.err, HasSubstr("not a bench --json result"));
  }
  const std::string replay_file = dir.File("replay.json");
  std::ofstream(replay_file) << replay.out;
  const nlohmann::json rows = nlohmann::json::parse(replay.out)["rows"];
  ASSERT_EQ(rows.size(), 3u);
  for (const nlohmann::json& row : rows) {
    EXPECT_EQ(row["to_measure"].size(), 7u) << row.dump();  // a third of 22
    EXPECT_THAT(row["to_measure"].dump(), HasSubstr("\"serial/nccl\""));  // always
  }
  // A cluster that does not exist: a backward layer's gradients over 4 nodes.
  const std::string backward = dir.File("backward.yaml");
  RunResult graph = Overlapctl(dir.path(), "",
                               {"graph", "--model", "llama3-8b", "--tp", "2", "--dp", "4", "--pass",
                                "backward", "--grads", "--output-file", backward});
  ASSERT_EQ(graph.exit_code, 0) << Describe(graph);
  RunResult cluster = Overlapctl(
      dir.path(), "",
      {"plan", backward, "--calibration", calibration, "--node-count", "4", "--link-gbps", "50"});
  ASSERT_EQ(cluster.exit_code, 0) << Describe(cluster);
  EXPECT_THAT(cluster.out, HasSubstr("4 ranks over 4 nodes"));
  EXPECT_THAT(cluster.out, HasSubstr("4 gradient all-reduce(s)"));
  EXPECT_THAT(cluster.out, HasSubstr("between nodes: 50 GB/s bus bandwidth"));
  RunResult no_link = Overlapctl(
      dir.path(), "", {"plan", backward, "--calibration", calibration, "--node-count", "4"});
  ASSERT_EQ(no_link.exit_code, 0) << Describe(no_link);
  EXPECT_THAT(no_link.out, HasSubstr("left out, the planner cannot say: fc2_grads"));
  // A degree the graph cannot be split by gets no number.
  RunResult odd = Overlapctl(dir.path(), "",
                             {"plan", backward, "--calibration", calibration, "--what-if", "tp=3"});
  EXPECT_EQ(odd.exit_code, 64) << Describe(odd);
  EXPECT_THAT(odd.err, HasSubstr("the planner cannot say: the graph does not split that way (tp 3)"));
  EXPECT_EQ(odd.out, "");
  // The sources' what-if questions answer from a calibration, assumptions beside.
  RunResult what_if =
      Child::Spawn({"/usr/bin/env", "python3",
                    std::string(OVERLAP_SOURCE_DIR) + "/bench/what_if_sources.py", "--calibration",
                    calibration, "--overlapctl", OVERLAPCTL_BIN},
                   dir.path(), {}, "")
          ->Wait(std::chrono::seconds(60));
  ASSERT_EQ(what_if.exit_code, 0) << Describe(what_if);
  // Like with like: the tokens derived from the source's MFU and step, the
  // whole model as the source states it and one layer as the other reading.
  EXPECT_THAT(what_if.out, HasSubstr("tokens = MFU x 8 GPUs x 989 TFLOP/s x step"));
  EXPECT_THAT(what_if.out, HasSubstr("as the source states it: the whole model's step = 80 "
                                     "layers at 344 tokens"));
  EXPECT_THAT(what_if.out, HasSubstr("read as one layer's step, at 28504 tokens"));
  EXPECT_THAT(what_if.out, HasSubstr("The source's figures do not hold together"));
  EXPECT_THAT(what_if.out, HasSubstr("blocking ring all-reduce"));
  EXPECT_THAT(what_if.out, HasSubstr("The source gives no token count"));
  EXPECT_THAT(what_if.out, HasSubstr("tp 8: transfers were measured at 2 ranks"));
  RunResult judge =
      Child::Spawn({"/usr/bin/env", "python3", std::string(OVERLAP_SOURCE_DIR) + "/bench/planner_replay.py",
                    replay_file},
                   dir.path(), {}, "")
          ->Wait(std::chrono::seconds(60));
  EXPECT_EQ(judge.exit_code, 0) << Describe(judge);
  EXPECT_THAT(judge.out, HasSubstr("hits 3 of 3 (100%), most measured 32%"));
  // A judge that would let a miss through is no judge: a 0% window misses
  // where the pruned set's best is not the run's best.
  RunResult strict =
      Child::Spawn({"/usr/bin/env", "python3", std::string(OVERLAP_SOURCE_DIR) + "/bench/planner_replay.py",
                    replay_file, "--max-error", "0.001"},
                   dir.path(), {}, "")
          ->Wait(std::chrono::seconds(60));
  EXPECT_EQ(strict.exit_code, 1) << Describe(strict);
  EXPECT_THAT(strict.out, HasSubstr("MISSED: median absolute error"));
}

}  // namespace
}  // namespace overlap::testing
