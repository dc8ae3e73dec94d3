// overlapctl against the real overlapd (host backend, 4 devices): the happy
// path of every command, text and JSON, and the exit statuses.
#include <sys/stat.h>
#include <unistd.h>

#include <regex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/auto_reason_util.h"
#include "tests/integration/harness.h"

namespace overlap::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// Splits a report row into its cells (columns are separated by 2+ spaces; no
// cell contains two spaces in a row).
std::vector<std::string> Cells(const std::string& row) {
  static const std::regex kGap("  +");
  std::vector<std::string> cells(std::sregex_token_iterator(row.begin(), row.end(), kGap, -1), {});
  return cells;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The report row of op `id`, or empty.
std::vector<std::string> RowOf(const std::string& report, const std::string& id) {
  for (const std::string& line : Lines(report)) {
    if (line.rfind(id + " ", 0) == 0) return Cells(line);
  }
  return {};
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    daemon_ = std::make_unique<Daemon>(dir_.path());
    ASSERT_TRUE(daemon_->Start());
    graph_ = dir_.File("small.yaml");
    WriteFileOrDie(graph_, kSmallGraph);
  }
  void TearDown() override {
    if (HasFailure() && daemon_) std::cerr << "overlapd log:\n" << daemon_->Log();
  }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
  std::string graph_;
};

TEST_F(CliTest, SubmitWaitPrintsReportAndTheJobIsQueryable) {
  // --wide: every column of the report (as a pipe gets anyway, below).
  RunResult submit = daemon_->Ctl({"--wide", "submit", graph_, "--wait"});
  ASSERT_EQ(submit.exit_code, 0) << Describe(submit);
  const std::vector<std::string> lines = Lines(submit.out);
  ASSERT_GE(lines.size(), 7u) << submit.out;
  std::smatch header;
  ASSERT_TRUE(std::regex_match(
      lines[0], header,
      std::regex("job (\\S+)  name: small-block  backend: host  tp: 4  dtype: bf16")))
      << lines[0];
  const std::string id = header[1];
  EXPECT_THAT(lines[1], StartsWith("OP     TYPE     SHAPE "));
  EXPECT_THAT(submit.err, HasSubstr("submitted job " + id + "\n"));
  EXPECT_THAT(submit.err, HasSubstr("job " + id + " SUCCEEDED\n"));
  EXPECT_THAT(submit.err, HasSubstr("job " + id + " [1/3] "));

  struct Expected {
    std::string id, type, shape, mode, chunks, transport;
  };
  for (const Expected& e : {Expected{"fc1", "ag_gemm", "128x128x256", "chunked", "2", "nccl"},
                            Expected{"fc2", "gemm_rs", "128x256x128", "serial", "1", "p2p"},
                            Expected{"out", "gemm_ar", "128x128x128", "bulk", "1", "nccl"}}) {
    SCOPED_TRACE(e.id);
    const std::vector<std::string> row = RowOf(submit.out, e.id);
    ASSERT_EQ(row.size(), 16u) << submit.out;
    EXPECT_EQ(row[1], e.type);
    EXPECT_EQ(row[2], e.shape);
    EXPECT_EQ(row[3], e.mode);
    EXPECT_EQ(row[4], e.chunks);
    EXPECT_EQ(row[5], e.transport);
    EXPECT_GT(std::stod(row[6]), 0.0) << "step ms";
    EXPECT_GT(std::stod(row[7]), 0.0) << "host ms";
    EXPECT_GT(std::stod(row[8]), 0.0) << "GEMM alone ms";
    EXPECT_GT(std::stod(row[9]), 0.0) << "comm alone ms";
    EXPECT_GE(std::stod(row[10]), 0.0) << "exposed comm ms";
    EXPECT_GE(std::stod(row[14]), 0.0) << "max relative error";
    EXPECT_EQ(row[15], "ok") << "verify: one word";
  }
  const std::vector<std::string> total = RowOf(submit.out, "total");
  ASSERT_EQ(total.size(), 4u) << submit.out;  // step, exposed comm, TFLOP/s
  EXPECT_GT(std::stod(total[1]), 0.0);
  EXPECT_GT(std::stod(total[3]), 0.0);

  RunResult list = daemon_->Ctl({"list"});
  ASSERT_EQ(list.exit_code, 0) << Describe(list);
  EXPECT_TRUE(std::regex_search(list.out, std::regex("\n" + id +
                                                     " +SUCCEEDED +root +small-block +0 +"
                                                     "0,1,2,3 +3 ")))
      << list.out;

  RunResult get = daemon_->Ctl({"get", id});
  ASSERT_EQ(get.exit_code, 0) << Describe(get);
  EXPECT_THAT(get.out, HasSubstr("state:     SUCCEEDED\n"));
  EXPECT_THAT(get.out, HasSubstr("devices:   0,1,2,3\n"));
  EXPECT_THAT(get.out, HasSubstr(lines[0] + "\n"));

  RunResult report = daemon_->Ctl({"--wide", "report", id});
  ASSERT_EQ(report.exit_code, 0) << Describe(report);
  EXPECT_EQ(report.out, submit.out);

  RunResult watch = daemon_->Ctl({"--wide", "watch", id});
  ASSERT_EQ(watch.exit_code, 0) << Describe(watch);
  EXPECT_EQ(watch.out, submit.out);

  // Piped, a table is never cut, whatever COLUMNS says (on a terminal it would fit it).
  RunResult piped = Overlapctl(dir_.path(), daemon_->address(), {"report", id},
                               std::chrono::seconds(30), {"COLUMNS=60"});
  ASSERT_EQ(piped.exit_code, 0) << Describe(piped);
  EXPECT_EQ(piped.out, submit.out);
  EXPECT_THAT(piped.out, Not(HasSubstr("to fit")));

  RunResult stats = daemon_->Ctl({"stats"});
  ASSERT_EQ(stats.exit_code, 0) << Describe(stats);
  EXPECT_THAT(stats.out, HasSubstr("jobs submitted: 1\n"));
  EXPECT_THAT(stats.out, HasSubstr("jobs rejected:  0\n"));
  EXPECT_THAT(stats.out, HasSubstr("QUEUED 0, RUNNING 0, SUCCEEDED 1, FAILED 0"));
}

TEST_F(CliTest, JsonOutputParses) {
  RunResult submit = daemon_->Ctl({"submit", graph_, "--wait", "--json"});
  ASSERT_EQ(submit.exit_code, 0) << Describe(submit);
  nlohmann::json job = ParseJson(submit.out);
  EXPECT_EQ(job["state"], "SUCCEEDED");
  EXPECT_EQ(job["name"], "small-block");
  EXPECT_EQ(job["error"], "");  // primitive fields are always printed
  EXPECT_EQ(job["devices"], nlohmann::json::array({0, 1, 2, 3}));
  const std::string id = job["id"];
  ASSERT_EQ(job["result"]["ops"].size(), 3u);
  EXPECT_EQ(job["result"]["backend"], "host");
  const nlohmann::json& fc1 = job["result"]["ops"][0];
  EXPECT_EQ(fc1["id"], "fc1");
  EXPECT_EQ(fc1["type"], "ag_gemm");
  EXPECT_EQ(fc1["tp"], 4);
  EXPECT_EQ(fc1["chunks"], 2);
  EXPECT_EQ(fc1["m"], 128);  // int64 is a number in --json (CHANGES.md, 0.2)
  // Unix times come with their RFC 3339 form.
  EXPECT_GT(job["submit_time_ms"].get<int64_t>(), 0);
  EXPECT_TRUE(std::regex_match(job["submit_time"].get<std::string>(),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")))
      << job["submit_time"];
  EXPECT_GT(fc1["step"]["median_ms"].get<double>(), 0.0);
  EXPECT_EQ(fc1["step"]["samples"], 3);
  EXPECT_TRUE(fc1["verified"].get<bool>());
  EXPECT_LE(fc1["max_rel_error"].get<double>(), fc1["tolerance"].get<double>());
  EXPECT_GT(job["result"]["total_step_ms"].get<double>(), 0.0);

  RunResult list = daemon_->Ctl({"--json", "list", "--state", "succeeded"});
  ASSERT_EQ(list.exit_code, 0) << Describe(list);
  nlohmann::json jobs = ParseJson(list.out)["jobs"];
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0]["id"], id);

  RunResult running = daemon_->Ctl({"list", "--state", "RUNNING", "--json"});
  ASSERT_EQ(running.exit_code, 0) << Describe(running);
  EXPECT_TRUE(ParseJson(running.out)["jobs"].empty()) << running.out;

  RunResult get = daemon_->Ctl({"get", id, "--json"});
  ASSERT_EQ(get.exit_code, 0) << Describe(get);
  EXPECT_EQ(ParseJson(get.out)["result"], job["result"]);

  RunResult stats = daemon_->Ctl({"stats", "--json"});
  ASSERT_EQ(stats.exit_code, 0) << Describe(stats);
  nlohmann::json s = ParseJson(stats.out);
  EXPECT_EQ(s["jobs_submitted"], 1);
  EXPECT_EQ(s["jobs_by_state"]["SUCCEEDED"], 1);
  EXPECT_EQ(s["devices"].size(), 4u);
}

TEST_F(CliTest, NodeShowsHostBackendWithFourDevices) {
  RunResult node = daemon_->Ctl({"node"});
  ASSERT_EQ(node.exit_code, 0) << Describe(node);
  EXPECT_THAT(node.out, HasSubstr("backend:  host\n"));
  EXPECT_THAT(node.out, HasSubstr("healthy:  yes\n"));
  EXPECT_THAT(node.out, HasSubstr("devices:  4\n"));
  EXPECT_THAT(node.out, HasSubstr("listen:   " + daemon_->address() + "\n"));

  RunResult json = daemon_->Ctl({"node", "--json"});
  ASSERT_EQ(json.exit_code, 0) << Describe(json);
  nlohmann::json info = ParseJson(json.out);
  EXPECT_EQ(info["backend"], "host");
  EXPECT_EQ(info["healthy"], true);
  ASSERT_EQ(info["devices"].size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(info["devices"][i]["index"], i);
  EXPECT_EQ(info["state_dir"], daemon_->state_dir());

  // The host backend has no NVML: no health table, and `health` cannot judge.
  EXPECT_THAT(node.out, Not(HasSubstr("health (")));
  RunResult health = daemon_->Ctl({"health"});
  EXPECT_EQ(health.exit_code, 3) << Describe(health);
  EXPECT_EQ(health.out, "");
  EXPECT_EQ(health.err,
            "overlapctl: health: no GPU health readings on this daemon (backend host; they come "
            "from NVML on the cuda backend)\n");
}

TEST_F(CliTest, TopSamplesEveryGpuAndStopsAfterCount) {
  RunResult top = daemon_->Ctl({"top", "--count", "2", "--interval", "0.05"});
  ASSERT_EQ(top.exit_code, 0) << Describe(top);
  const std::vector<std::string> lines = Lines(top.out);
  ASSERT_EQ(lines.size(), 1u + 2 * 4) << top.out;  // the header once, 4 GPUs per sample
  EXPECT_THAT(lines[0], StartsWith("TIME                  GPU SM_MHZ"));
  for (int i = 1; i < 9; ++i) EXPECT_EQ(lines[i].size(), lines[0].size()) << lines[i];

  RunResult json = daemon_->Ctl({"top", "--count", "1", "--json"});
  ASSERT_EQ(json.exit_code, 0) << Describe(json);
  nlohmann::json sample = ParseJson(json.out);
  ASSERT_EQ(sample["devices"].size(), 4u);
  EXPECT_EQ(sample["devices"][3]["device"], 3);
  EXPECT_EQ(sample["devices"][0]["telemetry_valid"], false);  // the host backend has none

  EXPECT_EQ(daemon_->Ctl({"top", "--interval", "0"}).exit_code, 64);
}

TEST_F(CliTest, CheckRunsEveryGpuAndEveryPair) {
  RunResult check = daemon_->Ctl(
      {"check", "--gemm-size", "64", "--link-mib", "1", "--iterations", "2", "--json"});
  // Host timings are noisy: "slow" (exit 1) may come up, a failure may not.
  ASSERT_TRUE(check.exit_code == 0 || check.exit_code == 1) << Describe(check);
  nlohmann::json j = ParseJson(check.out);
  ASSERT_EQ(j["gpus"].size(), 4u);
  ASSERT_EQ(j["links"].size(), 6u);  // every pair of 4
  EXPECT_EQ(j["links"][5]["a"], 2);
  EXPECT_EQ(j["links"][5]["b"], 3);
  for (const auto& g : j["gpus"]) EXPECT_GT(g["gemm_ms"].get<double>(), 0);
  for (const auto& l : j["links"]) EXPECT_GT(l["p2p_gbps"].get<double>(), 0);
  EXPECT_EQ(check.exit_code == 1, !j["slow_gpus"].empty() || !j["slow_links"].empty());
  // They ran as ordinary jobs: the list has them.
  RunResult list = daemon_->Ctl({"list"});
  EXPECT_THAT(list.out, HasSubstr("check-link-2-3"));
  EXPECT_THAT(list.out, HasSubstr("check-gpu-0"));

  // Without sizes, a host backend gets CPU-sized ones, and says so.
  RunResult sized = daemon_->Ctl({"check", "--devices", "0,1", "--iterations", "2", "--json"});
  ASSERT_TRUE(sized.exit_code == 0 || sized.exit_code == 1) << Describe(sized);
  EXPECT_EQ(ParseJson(sized.out)["gemm_size"], 512);
  EXPECT_EQ(ParseJson(sized.out)["link_mib"], 1);
  EXPECT_THAT(sized.err, HasSubstr("check: host backend: a 512x512x512 GEMM and 1 MiB shards"));

  RunResult bad = daemon_->Ctl({"check", "--devices", "0,9", "--no-links"});
  EXPECT_EQ(bad.exit_code, 3) << Describe(bad);  // the daemon refuses device 9
}

// The collectives alone over sizes, both transports, verified, on a group of
// three (sizes that do not split evenly round down to whole rows per rank).
TEST_F(CliTest, CommbenchSweepsSizesOnBothTransports) {
  RunResult run =
      daemon_->Ctl({"commbench", "--devices", "0,1,2", "--min-bytes", "64KiB", "--max-bytes",
                    "256KiB", "--iterations", "3", "--warmup", "1", "--json"});
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  nlohmann::json j = ParseJson(run.out);
  EXPECT_EQ(j["tp"], 3);
  EXPECT_EQ(j["backend"], "host");
  ASSERT_EQ(j["rows"].size(), 6u);  // 3 collectives x (64 KiB, 256 KiB)
  EXPECT_EQ(j["rows"][0]["collective"], "all_reduce");
  EXPECT_EQ(j["rows"][5]["collective"], "reduce_scatter");
  for (const auto& row : j["rows"]) {
    EXPECT_LE(row["bytes"].get<int64_t>(), 256 * 1024) << row.dump();
    for (const char* t : {"nccl", "p2p"}) {
      const auto& r = row["transports"][t];
      EXPECT_TRUE(r["verified"].get<bool>()) << row.dump();
      EXPECT_LE(r["max_rel_error"].get<double>(), 1e-2) << row.dump();
      EXPECT_GT(r["busbw_gbps"].get<double>(), 0) << row.dump();
    }
  }
  RunResult text = daemon_->Ctl({"commbench", "--collectives", "all_gather", "--transports", "p2p",
                                 "--min-bytes", "64KiB", "--max-bytes", "64KiB"});
  ASSERT_EQ(text.exit_code, 0) << Describe(text);
  EXPECT_THAT(text.out, HasSubstr("commbench: 4 rank(s), bf16"));
  EXPECT_THAT(text.out, HasSubstr("best busbw: all_gather over p2p "));
  EXPECT_THAT(text.err, HasSubstr("commbench: job "));

  // Without --max-bytes, a host backend stops at 64 MiB, and says so.
  RunResult host = daemon_->Ctl({"commbench", "--collectives", "all_gather", "--transports", "p2p",
                                 "--min-bytes", "16MiB", "--factor", "4", "--iterations", "1",
                                 "--warmup", "0", "--no-verify", "--json"});
  ASSERT_EQ(host.exit_code, 0) << Describe(host);
  nlohmann::json sized = ParseJson(host.out);
  ASSERT_EQ(sized["rows"].size(), 2u) << host.out;  // 16 and 64 MiB
  EXPECT_EQ(sized["rows"][1]["bytes"], int64_t{64} << 20);
  EXPECT_THAT(host.err, HasSubstr("commbench: host backend: sizes up to 64MiB"));

  // One rank has no peer: one transport is timed, and the output says why.
  RunResult one = daemon_->Ctl({"commbench", "--devices", "0", "--collectives", "all_gather",
                                "--min-bytes", "64KiB", "--max-bytes", "64KiB", "--json"});
  ASSERT_EQ(one.exit_code, 0) << Describe(one);
  nlohmann::json alone = ParseJson(one.out);
  ASSERT_EQ(alone["rows"].size(), 1u) << one.out;
  EXPECT_TRUE(alone["rows"][0]["transports"].contains("nccl")) << one.out;
  EXPECT_FALSE(alone["rows"][0]["transports"].contains("p2p")) << one.out;
  EXPECT_THAT(one.err, HasSubstr("one rank: every transport is a local copy, so it times nccl"));

  RunResult bad = daemon_->Ctl({"commbench", "--collectives", "broadcast"});
  EXPECT_EQ(bad.exit_code, 64) << Describe(bad);
  EXPECT_THAT(bad.err, HasSubstr("unknown collective \"broadcast\""));
  RunResult bad_size = daemon_->Ctl({"commbench", "--min-bytes", "lots"});
  EXPECT_EQ(bad_size.exit_code, 64) << Describe(bad_size);
  EXPECT_THAT(bad_size.err, StartsWith("overlapctl: --min-bytes: "));
}

// --algorithms: the all-reduce in each copy-engine layout beside p2p's own, each
// verified; the host backend's library collectives have one algorithm, so its
// NCCL columns stay as they were, and it says so. A graph that pins ring over
// NCCL is refused there at submission.
TEST_F(CliTest, CommbenchMeasuresTheAllReduceLayouts) {
  RunResult run = daemon_->Ctl({"commbench", "--collectives", "all_reduce", "--algorithms",
                                "ring,tree,ps", "--min-bytes", "256KiB", "--max-bytes", "256KiB",
                                "--iterations", "2", "--warmup", "1", "--json"});
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  EXPECT_THAT(run.err, HasSubstr("--algorithms runs over p2p only"));
  nlohmann::json j = ParseJson(run.out);
  EXPECT_EQ(j["algorithms"], nlohmann::json({"ring", "tree", "ps"}));
  ASSERT_EQ(j["rows"].size(), 1u) << run.out;
  for (const char* v : {"nccl", "p2p", "p2p/ring", "p2p/tree", "p2p/ps"}) {
    const auto& r = j["rows"][0]["transports"][v];
    ASSERT_FALSE(r.is_null()) << v << " " << run.out;
    EXPECT_TRUE(r["verified"].get<bool>()) << v;
    EXPECT_LE(r["max_rel_error"].get<double>(), 1e-2) << v;
  }
  EXPECT_TRUE(j["rows"][0]["transports"]["nccl/ring"].is_null());

  RunResult text = daemon_->Ctl({"commbench", "--collectives", "all_reduce", "--transports", "p2p",
                                 "--algorithms", "ps", "--min-bytes", "64KiB", "--max-bytes",
                                 "64KiB", "--iterations", "1", "--warmup", "0"});
  ASSERT_EQ(text.exit_code, 0) << Describe(text);
  EXPECT_THAT(text.out, HasSubstr("P2P/PS_MS"));
  EXPECT_THAT(text.out, HasSubstr("all_reduce bytes into the busiest GPU, per byte of buffer, at 4 "
                                  "ranks: p2p 1.50 (direct), p2p/ps 3.00"));

  RunResult bad = daemon_->Ctl({"commbench", "--algorithms", "ps", "--transports", "nccl"});
  EXPECT_EQ(bad.exit_code, 64) << Describe(bad);
  EXPECT_THAT(bad.err, HasSubstr("add p2p to --transports"));

  const std::string graph = dir_.File("ring-over-nccl.yaml");
  WriteFileOrDie(graph,
                 "name: pinned\nops:\n  - {id: g, type: all_reduce, m: 64, n: 8, transport: "
                 "nccl, algorithm: ring}\n");
  RunResult refused = daemon_->Ctl({"submit", graph});
  EXPECT_EQ(refused.exit_code, 3) << Describe(refused);
  EXPECT_THAT(refused.err, HasSubstr("INVALID_ARGUMENT: ops[0].algorithm: this backend's library "
                                     "collectives have no ring choice"));
}

// Without --shapes or --graph, a host backend runs the default sweep at 1/32 of
// its GPU shapes, says so, and does not call its simulated GPUs slow.
TEST_F(CliTest, BenchShrinksTheDefaultSweepOnTheHostBackend) {
  RunResult run = daemon_->Ctl({"bench", "--devices", "0,1", "--repeats", "1", "--iterations", "1",
                                "--warmup", "0", "--no-verify", "--json"});
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  EXPECT_THAT(run.err, HasSubstr("bench: host backend: the default sweep's shapes divided by 32"));
  const nlohmann::json rows = ParseJson(run.out)["rows"];
  ASSERT_EQ(rows.size(), 15u);
  EXPECT_EQ(rows[0]["op"], "ag_gemm");  // 4096 x 8192 x 8192 on a GPU
  EXPECT_EQ(rows[0]["m"], 128);
  EXPECT_EQ(rows[0]["k"], 256);
  EXPECT_EQ(rows[0]["n"], 256);
  EXPECT_EQ(rows[14]["op"], "gemm_ar");  // 16384 x 7168 x 8192
  EXPECT_EQ(rows[14]["m"], 512);
  EXPECT_EQ(rows[14]["k"], 224);
  EXPECT_EQ(rows[14]["n"], 256);
}

// The sweep of a user's own graph: its three shapes, in its dtype, auto beside
// serial; --shapes with --graph, or a graph with nothing to sweep, is a usage error.
TEST_F(CliTest, BenchSweepsTheShapesOfAGraph) {
  RunResult run = daemon_->Ctl({"bench", "--graph", graph_, "--devices", "0,1", "--repeats", "1",
                                "--iterations", "2", "--warmup", "1", "--json"});
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  nlohmann::json j = ParseJson(run.out);
  EXPECT_EQ(j["dtype"], "bf16");
  ASSERT_EQ(j["rows"].size(), 3u);
  EXPECT_EQ(j["rows"][0]["op"], "ag_gemm");
  EXPECT_EQ(j["rows"][1]["op"], "gemm_rs");
  EXPECT_EQ(j["rows"][2]["op"], "gemm_ar");
  EXPECT_EQ(j["rows"][1]["k"], 256);
  for (const auto& row : j["rows"]) EXPECT_EQ(row["tp"], 2) << row.dump();

  RunResult both = daemon_->Ctl({"bench", "--graph", graph_, "--shapes", "ag_gemm:128x128x128"});
  EXPECT_EQ(both.exit_code, 64) << Describe(both);
  const std::string grads = dir_.File("grads.yaml");
  WriteFileOrDie(grads, "name: g\nops:\n  - {id: g, type: all_reduce, m: 128, n: 64}\n");
  RunResult none = daemon_->Ctl({"bench", "--graph", grads});
  EXPECT_EQ(none.exit_code, 64) << Describe(none);
  EXPECT_THAT(none.err, HasSubstr("no ag_gemm, gemm_rs or gemm_ar op to sweep"));
}

// What auto tuned is listed, survives a restart, is re-tuned by bench unless
// told otherwise, and can be forgotten.
TEST_F(CliTest, TuningListsWhatAutoChoseAndForgetsIt) {
  const std::string graph = dir_.File("auto.yaml");
  WriteFileOrDie(graph,
                 "name: tuned\ndevices: [0, 1]\niterations: 2\nwarmup: 1\nlayer_step: false\n"
                 "ops:\n  - {id: fc1, type: ag_gemm, m: 128, k: 128, n: 256, mode: auto}\n");
  RunResult submit = daemon_->Ctl({"submit", graph, "--wait"});
  ASSERT_EQ(submit.exit_code, 0) << Describe(submit);
  RunResult list = daemon_->Ctl({"tuning", "list"});
  ASSERT_EQ(list.exit_code, 0) << Describe(list);
  std::vector<std::string> lines = Lines(list.out);
  ASSERT_EQ(lines.size(), 3u) << list.out;
  EXPECT_THAT(lines[0], StartsWith("OP "));
  const std::vector<std::string> row = Cells(lines[2]);
  ASSERT_EQ(row.size(), 9u) << lines[2];
  EXPECT_EQ(row[0], "ag_gemm");
  EXPECT_EQ(row[1], "128x128x256");
  EXPECT_EQ(row[3], "2");
  EXPECT_EQ(row[4], "auto/0/auto");
  EXPECT_EQ(row[8], "yes");

  // The daemon restarts on the same state directory: the choice is still there.
  daemon_->Terminate(std::chrono::seconds(20));
  daemon_ = std::make_unique<Daemon>(dir_.path());
  ASSERT_TRUE(daemon_->Start());
  RunResult json = daemon_->Ctl({"tuning", "list", "--op", "ag_gemm", "--json"});
  ASSERT_EQ(json.exit_code, 0) << Describe(json);
  nlohmann::json j = ParseJson(json.out);
  ASSERT_EQ(j["schedules"].size(), 1u) << json.out;
  EXPECT_EQ(j["schedules"][0]["schedule"], row[5]);
  EXPECT_TRUE(j["schedules"][0]["current"].get<bool>());
  EXPECT_EQ(ParseJson(daemon_->Ctl({"tuning", "list", "--op", "gemm_rs", "--json"}).out)
                .value("schedules", nlohmann::json::array())
                .size(),
            0u);

  // bench tunes afresh by default; --use-tuned lets the kept choice answer.
  const std::vector<std::string> bench = {
      "bench",     "--shapes", "ag_gemm:128x128x256", "--devices", "0,1",
      "--repeats", "1",        "--iterations",        "2",         "--warmup",
      "1",         "--json"};
  RunResult fresh = daemon_->Ctl(bench);
  ASSERT_EQ(fresh.exit_code, 0) << Describe(fresh);
  EXPECT_THAT(ParseJson(fresh.out)["rows"][0]["auto_reasons"][0].get<std::string>(),
              IsFreshlyAutotuned());
  std::vector<std::string> reuse = bench;
  reuse.push_back("--use-tuned");
  RunResult kept = daemon_->Ctl(reuse);
  ASSERT_EQ(kept.exit_code, 0) << Describe(kept);
  EXPECT_THAT(ParseJson(kept.out)["rows"][0]["auto_reasons"][0].get<std::string>(),
              StartsWith("tuning cache"));

  RunResult unnamed = daemon_->Ctl({"tuning", "forget"});
  EXPECT_EQ(unnamed.exit_code, 3) << Describe(unnamed);
  EXPECT_THAT(unnamed.err, StartsWith("overlapctl: INVALID_ARGUMENT: forget: name what"));
  EXPECT_EQ(daemon_->Ctl({"tuning", "forget", "--shape", "128x128"}).exit_code, 64);
  RunResult stale = daemon_->Ctl({"tuning", "forget", "--stale"});
  ASSERT_EQ(stale.exit_code, 0) << Describe(stale);
  EXPECT_THAT(stale.out, StartsWith("forgot 0 tuned schedules"));
  RunResult all = daemon_->Ctl({"tuning", "forget", "--all"});
  ASSERT_EQ(all.exit_code, 0) << Describe(all);
  EXPECT_THAT(all.out, StartsWith("forgot 1 tuned schedule;"));
  EXPECT_EQ(daemon_->Ctl({"tuning", "list"}).out, "no tuned schedules\n");
}

// A sweep of a graph's shapes tunes them for the graph itself (OPERATIONS.md).
TEST_F(CliTest, GraphSubmittedAfterItsBenchUsesTheSweepsChoices) {
  const std::string graph = dir_.File("layer.yaml");
  WriteFileOrDie(graph,
                 "name: layer\ndevices: [0, 1]\niterations: 2\nwarmup: 1\nlayer_step: false\n"
                 "ops:\n  - {id: fc1, type: ag_gemm, m: 128, k: 128, n: 256, mode: auto}\n");
  RunResult bench = daemon_->Ctl({"bench", "--graph", graph, "--repeats", "1", "--iterations", "2",
                                  "--warmup", "1", "--json"});
  ASSERT_EQ(bench.exit_code, 0) << Describe(bench);
  RunResult run = daemon_->Ctl({"submit", graph, "--wait", "--json"});
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  EXPECT_THAT(ParseJson(run.out)["result"]["ops"][0]["auto_reason"].get<std::string>(),
              StartsWith("tuning cache"));
}

// A tuned job pinned and submitted again runs the same schedules, none tuned.
TEST_F(CliTest, PinnedGraphRunsTheSchedulesAutoChose) {
  const std::string graph = dir_.File("auto.yaml");
  WriteFileOrDie(graph,
                 "name: to-pin\ndevices: [0, 1]\niterations: 2\nwarmup: 1\nlayer_step: false\n"
                 "ops:\n  - {id: fc1, type: ag_gemm, m: 128, k: 128, n: 256, mode: auto}\n"
                 "  - {id: fc2, type: gemm_rs, m: 128, k: 256, n: 128, after: [fc1]}\n");
  RunResult tuned = daemon_->Ctl({"submit", graph, "--wait", "--json"});
  ASSERT_EQ(tuned.exit_code, 0) << Describe(tuned);
  const nlohmann::json first = ParseJson(tuned.out);
  const std::string pinned = dir_.File("pinned.yaml");
  RunResult pin = daemon_->Ctl({"pin", first["id"], "--output-file", pinned});
  ASSERT_EQ(pin.exit_code, 0) << Describe(pin);
  EXPECT_EQ(pin.err, "wrote " + pinned + "\n");
  RunResult again = daemon_->Ctl({"submit", pinned, "--wait", "--json"});
  ASSERT_EQ(again.exit_code, 0) << Describe(again);
  const nlohmann::json second = ParseJson(again.out);
  ASSERT_EQ(second["result"]["ops"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const nlohmann::json& a = first["result"]["ops"][i];
    const nlohmann::json& b = second["result"]["ops"][i];
    EXPECT_EQ(a["id"], b["id"]);
    EXPECT_THAT(a["auto_reason"].get<std::string>(), IsFreshlyAutotuned());
    EXPECT_EQ(b["requested_mode"], a["mode"]);
    EXPECT_EQ(b["mode"], a["mode"]);
    EXPECT_EQ(b["chunks"], a["chunks"]);
    EXPECT_EQ(b["transport"], a["transport"]);
    EXPECT_EQ(b["auto_reason"], "as requested");
  }
  RunResult json = daemon_->Ctl({"pin", first["id"], "--json"});
  ASSERT_EQ(json.exit_code, 0) << Describe(json);
  EXPECT_EQ(ParseJson(json.out)["graph"].get<std::string>(), ReadFileOrEmpty(pinned));
  RunResult unknown = daemon_->Ctl({"pin", "job-999999"});
  EXPECT_EQ(unknown.exit_code, 3) << Describe(unknown);
}

// Each op's traced iteration as charts and as a Chrome trace; an unknown op or
// job, or a job traced with `timeline: false`, is refused.
TEST_F(CliTest, TimelineChartsAndExportsEachTracedIteration) {
  RunResult done = daemon_->Ctl({"submit", graph_, "--wait", "--json"});
  ASSERT_EQ(done.exit_code, 0) << Describe(done);
  const nlohmann::json job = ParseJson(done.out);
  const std::string id = job["id"];
  const std::string first_op = job["result"]["ops"][0]["id"];
  RunResult report = daemon_->Ctl({"report", id});
  ASSERT_EQ(report.exit_code, 0) << Describe(report);
  EXPECT_THAT(report.out, HasSubstr("timeline: `overlapctl timeline " + id + "`"));
  const std::string trace = dir_.File("trace.json");
  RunResult text =
      daemon_->Ctl({"timeline", id, "--op", first_op, "--width", "40", "--output-file", trace});
  ASSERT_EQ(text.exit_code, 0) << Describe(text);
  EXPECT_THAT(text.out, StartsWith(first_op + "  "));
  EXPECT_THAT(text.out, HasSubstr("  rank 0 compute |"));
  EXPECT_THAT(text.out, HasSubstr("  rank 1 compute |"));
  EXPECT_EQ(text.err, "wrote " + trace + "\n");
  const nlohmann::json written = ParseJson(ReadFileOrEmpty(trace));
  ASSERT_TRUE(written["traceEvents"].is_array());
  EXPECT_GT(written["traceEvents"].size(), 2u);
  for (const nlohmann::json& e : written["traceEvents"]) {
    if (e["ph"] == "X") {
      EXPECT_EQ(e["args"]["op"], first_op);
    }
  }
  RunResult all = daemon_->Ctl({"timeline", id, "--spans", "--width", "20"});
  ASSERT_EQ(all.exit_code, 0) << Describe(all);
  EXPECT_THAT(all.out, HasSubstr("    IDLE_MS  SPAN"));
  RunResult json = daemon_->Ctl({"timeline", id, "--json"});
  ASSERT_EQ(json.exit_code, 0) << Describe(json);
  EXPECT_EQ(ParseJson(json.out)["otherData"]["job"], id);

  RunResult unknown_op = daemon_->Ctl({"timeline", id, "--op", "nope"});
  EXPECT_EQ(unknown_op.exit_code, 3) << Describe(unknown_op);
  EXPECT_THAT(unknown_op.err, HasSubstr("NOT_FOUND: job " + id + " op nope is not in the job"));
  RunResult unknown_job = daemon_->Ctl({"timeline", "job-999999"});
  EXPECT_EQ(unknown_job.exit_code, 3) << Describe(unknown_job);

  const std::string untraced = dir_.File("untraced.yaml");
  WriteFileOrDie(untraced,
                 "name: untraced\ndevices: [0, 1]\niterations: 2\nwarmup: 1\ntimeline: false\n"
                 "ops:\n  - {id: fc1, type: ag_gemm, m: 128, k: 128, n: 256, mode: serial}\n");
  RunResult plain = daemon_->Ctl({"submit", untraced, "--wait", "--json"});
  ASSERT_EQ(plain.exit_code, 0) << Describe(plain);
  RunResult none = daemon_->Ctl({"timeline", ParseJson(plain.out)["id"]});
  EXPECT_EQ(none.exit_code, 3) << Describe(none);
  EXPECT_THAT(none.err, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_THAT(none.err, HasSubstr("has no timeline"));
}

// Two runs of one graph, op by op; a job without results or an unknown id is refused.
TEST_F(CliTest, CompareShowsTwoJobsOpByOp) {
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    RunResult done = daemon_->Ctl({"submit", graph_, "--wait", "--json"});
    ASSERT_EQ(done.exit_code, 0) << Describe(done);
    ids.push_back(ParseJson(done.out)["id"]);
  }
  RunResult text = daemon_->Ctl({"compare", ids[0], ids[1]});
  ASSERT_EQ(text.exit_code, 0) << Describe(text);
  EXPECT_THAT(text.out,
              StartsWith("A: " + ids[0] + " (small-block)  B: " + ids[1] + " (small-block)\n"));
  EXPECT_THAT(text.out, HasSubstr("\nfc1 "));
  EXPECT_THAT(text.out, HasSubstr("\ntotal "));
  EXPECT_THAT(text.out, Not(HasSubstr("differs:")));
  RunResult json = daemon_->Ctl({"compare", ids[0], ids[1], "--json"});
  ASSERT_EQ(json.exit_code, 0) << Describe(json);
  const nlohmann::json j = ParseJson(json.out);
  ASSERT_FALSE(j["ops"].empty());
  EXPECT_GT(j["ops"][0]["step_ratio"].get<double>(), 0);

  RunResult unknown = daemon_->Ctl({"compare", ids[0], "job-999999"});
  EXPECT_EQ(unknown.exit_code, 3) << Describe(unknown);
  EXPECT_THAT(unknown.err, StartsWith("overlapctl: NOT_FOUND: "));
}

TEST_F(CliTest, SubmitFromStdinPrintsTheIdThenWatchFollowsIt) {
  RunResult submit = Overlapctl(dir_.path(), daemon_->address(), {"submit", "-"},
                                std::chrono::seconds(30), {}, graph_);
  ASSERT_EQ(submit.exit_code, 0) << Describe(submit);
  const std::string id = Trim(submit.out);
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(id.find('\n'), std::string::npos) << "only the id is printed: " << submit.out;

  RunResult watch = daemon_->Ctl({"watch", id});
  ASSERT_EQ(watch.exit_code, 0) << Describe(watch);
  EXPECT_THAT(watch.out, StartsWith("job " + id + "  name: small-block  backend: host"));
  EXPECT_THAT(watch.err, HasSubstr("job " + id + " SUCCEEDED\n"));
}

// validate runs every check a submission meets against the daemon and queues
// nothing: a good graph is valid, one the node cannot run is refused with the
// submission's code and reason, and the job list stays empty.
TEST_F(CliTest, ValidateChecksAgainstTheNodeAndRunsNothing) {
  RunResult good = daemon_->Ctl({"validate", graph_});
  ASSERT_EQ(good.exit_code, 0) << Describe(good);
  EXPECT_EQ(good.out, graph_ +
                          ": valid: small-block, priority 0, devices 0,1,2,3; nothing was "
                          "queued or run\n");
  RunResult json = daemon_->Ctl({"validate", graph_, "--json"});
  ASSERT_EQ(json.exit_code, 0) << Describe(json);
  EXPECT_EQ(ParseJson(json.out)["id"], "") << "no id: nothing was queued";
  const std::string too_many = dir_.File("eight.yaml");
  WriteFileOrDie(too_many,
                 "devices: [0, 1, 2, 3, 4, 5, 6, 7]\n"
                 "ops: [{id: a, type: ag_gemm, m: 64, k: 64, n: 64}]\n");
  RunResult refused = daemon_->Ctl({"validate", too_many});
  EXPECT_EQ(refused.exit_code, 3) << Describe(refused);
  EXPECT_THAT(refused.err, StartsWith("overlapctl: INVALID_ARGUMENT: "));
  const std::string newer = dir_.File("newer.yaml");
  WriteFileOrDie(newer, "version: 2\nops: [{id: a, type: gemm, m: 64, k: 64, n: 64}]\n");
  RunResult version = daemon_->Ctl({"validate", newer});
  EXPECT_EQ(version.exit_code, 3) << Describe(version);
  EXPECT_THAT(version.err, HasSubstr("version: this overlapd reads graph version 1; got 2"));
  RunResult list = daemon_->Ctl({"list"});
  ASSERT_EQ(list.exit_code, 0) << Describe(list);
  EXPECT_EQ(list.out.find("small-block"), std::string::npos) << list.out;
}

TEST_F(CliTest, UnknownJobIdIsNotFound) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"get", "no-such-job"},
                                             {"cancel", "no-such-job"},
                                             {"watch", "no-such-job"},
                                             {"report", "no-such-job"}}) {
    SCOPED_TRACE(args[0]);
    RunResult r = daemon_->Ctl(args);
    EXPECT_EQ(r.exit_code, 3) << Describe(r);
    EXPECT_THAT(r.err, StartsWith("overlapctl: NOT_FOUND: "));
    EXPECT_THAT(r.err, HasSubstr("no-such-job"));
    EXPECT_EQ(r.out, "");
  }
}

TEST_F(CliTest, CancelOfAFinishedJobIsRefused) {
  RunResult submit = daemon_->Ctl({"submit", graph_, "--wait", "--json"});
  ASSERT_EQ(submit.exit_code, 0) << Describe(submit);
  const std::string id = ParseJson(submit.out)["id"];
  RunResult cancel = daemon_->Ctl({"cancel", id});
  EXPECT_EQ(cancel.exit_code, 3) << Describe(cancel);
  EXPECT_THAT(cancel.err, StartsWith("overlapctl: FAILED_PRECONDITION: "));

  // --ignore-not-found (kubectl delete's): an ended job or none at all is no error.
  RunResult ended = daemon_->Ctl({"cancel", id, "--ignore-not-found"});
  EXPECT_EQ(ended.exit_code, 0) << Describe(ended);
  EXPECT_EQ(ended.out, "job " + id + " SUCCEEDED\n");
  RunResult missing = daemon_->Ctl({"cancel", "job-999999", "--ignore-not-found"});
  EXPECT_EQ(missing.exit_code, 0) << Describe(missing);
  EXPECT_EQ(missing.out, "");
  EXPECT_EQ(missing.err, "overlapctl: job job-999999 not found; nothing to cancel\n");
  RunResult named = daemon_->Ctl({"cancel", id, "--ignore-not-found", "-o", "name"});
  EXPECT_EQ(named.exit_code, 0) << Describe(named);
  EXPECT_EQ(named.out, id + "\n");
}

// -o as kubectl's: name prints ids alone, yaml the JSON document as YAML; a
// file is --output-file, and -o FILE says so.
TEST_F(CliTest, OutputFormatsNameYamlAndRefuseAFile) {
  RunResult submit = daemon_->Ctl({"-o", "name", "--quiet", "submit", graph_, "--wait"});
  ASSERT_EQ(submit.exit_code, 0) << Describe(submit);
  const std::string id = Trim(submit.out);
  EXPECT_EQ(submit.out, id + "\n");
  EXPECT_EQ(submit.err, "") << "--quiet: no progress";

  RunResult list = daemon_->Ctl({"list", "-o", "name"});
  ASSERT_EQ(list.exit_code, 0) << Describe(list);
  EXPECT_EQ(list.out, id + "\n");

  RunResult yaml = daemon_->Ctl({"get", id, "-o", "yaml"});
  ASSERT_EQ(yaml.exit_code, 0) << Describe(yaml);
  EXPECT_THAT(yaml.out, HasSubstr("\nid: " + id + "\n"));
  EXPECT_THAT(yaml.out, HasSubstr("\nstate: SUCCEEDED\n"));
  EXPECT_THAT(yaml.out, Not(HasSubstr("{\n")));

  RunResult wide = daemon_->Ctl({"report", id, "-o", "wide"});
  ASSERT_EQ(wide.exit_code, 0) << Describe(wide);
  EXPECT_THAT(wide.out, HasSubstr("BUSBW_GBPS"));

  RunResult file = daemon_->Ctl({"pin", id, "-o", dir_.File("pinned.yaml")});
  EXPECT_EQ(file.exit_code, 64) << Describe(file);
  EXPECT_THAT(file.err, HasSubstr("use --output-file " + dir_.File("pinned.yaml")));
  RunResult no_names = daemon_->Ctl({"stats", "-o", "name"});
  EXPECT_EQ(no_names.exit_code, 64) << Describe(no_names);
  EXPECT_EQ(no_names.err,
            "overlapctl: -o name: stats prints no job ids (-o json or yaml print "
            "everything)\n");

  // Listed times are RFC 3339, in UTC.
  RunResult table = daemon_->Ctl({"list"});
  ASSERT_EQ(table.exit_code, 0) << Describe(table);
  EXPECT_TRUE(std::regex_search(table.out, std::regex(" 20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}:"
                                                      "[0-9]{2}:[0-9]{2}Z ")))
      << table.out;
}

TEST(CliNoDaemonTest, UnreachableDaemonExits2NamingTheAddress) {
  TempDir dir;
  const std::string address = "unix:" + dir.File("nobody.sock");
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"node"}, {"list"}, {"get", "1"}, {"watch", "1"}, {"stats"}}) {
    SCOPED_TRACE(args[0]);
    const auto start = Clock::now();
    RunResult r = Overlapctl(dir.path(), address, args, std::chrono::seconds(20));
    EXPECT_EQ(r.exit_code, 2) << Describe(r);
    EXPECT_THAT(r.err, StartsWith("overlapctl: cannot reach overlapd at " + address + ": "));
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(8));
  }
  // OVERLAPD_ADDR sets the default address.
  const std::string env_address = "unix:" + dir.File("from-env.sock");
  RunResult r = Overlapctl(dir.path(), "", {"node"}, std::chrono::seconds(20),
                           {"OVERLAPD_ADDR=" + env_address});
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_THAT(r.err, StartsWith("overlapctl: cannot reach overlapd at " + env_address + ": "));
}

TEST(CliNoDaemonTest, UsageErrorsExit64) {
  TempDir dir;
  const std::string address = "unix:" + dir.File("nobody.sock");
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{},
                                             {"frobnicate"},
                                             {"get"},
                                             {"list", "--state", "sleeping"},
                                             {"list", "--limit", "many"},
                                             {"submit", dir.File("missing.yaml")}}) {
    SCOPED_TRACE(::testing::PrintToString(args));
    RunResult r = Overlapctl(dir.path(), address, args, std::chrono::seconds(20));
    EXPECT_EQ(r.exit_code, 64) << Describe(r);
  }
  // A graph file that cannot be read says why.
  RunResult missing = Overlapctl(dir.path(), address, {"submit", dir.File("missing.yaml")});
  EXPECT_THAT(missing.err,
              HasSubstr("cannot read " + dir.File("missing.yaml") + ": No such file or directory"));
  RunResult directory = Overlapctl(dir.path(), address, {"submit", dir.path()});
  EXPECT_EQ(directory.exit_code, 64) << Describe(directory);
  EXPECT_THAT(directory.err, HasSubstr("cannot read " + dir.path() + ": it is a directory"));

  RunResult help = Overlapctl(dir.path(), "", {"--help"});
  EXPECT_EQ(help.exit_code, 0) << Describe(help);
  EXPECT_THAT(help.out, HasSubstr("submit"));
}

// Every file overlapctl reads is bounded: a device that never ends, a FIFO, a
// file past 64 MiB or a directory is refused by name (exit 64) before any
// daemon is asked, never read without end (graph --config /dev/zero grew
// without limit) or crashed on.
TEST(CliNoDaemonTest, FilesItReadsAreBoundedAndDirectoriesRefused) {
  TempDir dir;
  const std::string huge = dir.File("huge.yaml");
  { std::ofstream(huge) << ""; }
  ASSERT_EQ(::truncate(huge.c_str(), (int64_t{64} << 20) + 1), 0);
  const std::string fifo = dir.File("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // A writer that never stops, as `yes` into a named pipe would be.
  std::unique_ptr<Child> writer =
      Child::Spawn({"/bin/sh", "-c", "exec cat /dev/zero > " + fifo}, dir.path());
  const std::string nowhere = "unix:" + dir.File("none.sock");
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {{"graph", "--config", "/dev/zero"}, "/dev/zero: larger than 64 MiB"},
           {{"graph", "--config", fifo}, fifo + ": larger than 64 MiB"},
           {{"graph", "--config", dir.path()}, dir.path() + ": it is a directory"},
           {{"submit", "/dev/zero"}, "/dev/zero: larger than 64 MiB"},
           {{"submit", huge}, huge + ": larger than 64 MiB"},
           {{"validate", dir.path()}, dir.path() + ": it is a directory"},
           {{"export", "--format", "torchtitan", "--bench", "/dev/zero"},
            "/dev/zero: larger than 64 MiB"},
       }) {
    SCOPED_TRACE(c.args[0] + " " + c.args.back());
    RunResult refused = Overlapctl(dir.path(), nowhere, c.args, std::chrono::seconds(60));
    EXPECT_EQ(refused.exit_code, 64) << Describe(refused);
    EXPECT_THAT(refused.err, HasSubstr("cannot read " + c.says));
  }
  writer->Signal(SIGKILL);
}

TEST(CliNoDaemonTest, VersionUnknownCommandsAndAddressesSayWhatIsWrong) {
  TempDir dir;
  const std::string address = "unix:" + dir.File("nobody.sock");
  RunResult typo = Overlapctl(dir.path(), address, {"tpo"});
  EXPECT_EQ(typo.exit_code, 64) << Describe(typo);
  EXPECT_EQ(typo.err,
            "overlapctl: unknown command 'tpo'; did you mean 'top'? (overlapctl --help lists "
            "them)\n");
  RunResult far = Overlapctl(dir.path(), address, {"frobnicate"});
  EXPECT_EQ(far.err, "overlapctl: unknown command 'frobnicate' (overlapctl --help lists them)\n");
  // --version answers for the client even with no daemon, and says why not for it.
  RunResult version = Overlapctl(dir.path(), address, {"--version"});
  EXPECT_EQ(version.exit_code, 0) << Describe(version);
  EXPECT_THAT(version.out, StartsWith("overlapctl " OVERLAP_VERSION " ("));
  EXPECT_THAT(version.out, HasSubstr("overlapd: not asked: "));
  // A missing socket asks whether the daemon runs; a TCP name needs its port.
  RunResult missing = Overlapctl(dir.path(), address, {"node"});
  EXPECT_THAT(missing.err, HasSubstr("is overlapd running? (systemctl status overlapd"));
  RunResult no_port = Overlapctl(dir.path(), "node1", {"node"});
  EXPECT_EQ(no_port.exit_code, 64) << Describe(no_port);
  EXPECT_THAT(no_port.err, HasSubstr("a TCP address needs its port (HOST:PORT, e.g. node1:7070)"));
}

// GPU health end to end: the host backend simulates NVML's readings with
// host_sick_device (tests only), GPU 2 with a PCIe link at x8 and uncorrectable
// ECC errors. node shows it; health and check name it and exit 1.
TEST(CliHealthTest, ASickGpuIsNamedByNodeHealthAndCheck) {
  TempDir dir;
  const std::string config = dir.File("overlapd.yaml");
  WriteFileOrDie(config, "host_sick_device: 2\n");
  Daemon daemon(dir.path(), {"--config", config});
  ASSERT_TRUE(daemon.Start());
  RunResult node = daemon.Ctl({"node"});
  ASSERT_EQ(node.exit_code, 0) << Describe(node);
  EXPECT_THAT(node.out, HasSubstr("    2  Gen5x8/Gen5x16"));
  EXPECT_THAT(node.out, HasSubstr("GPU 2: its PCIe link runs at x8 of x16"));

  RunResult health = daemon.Ctl({"health"});
  EXPECT_EQ(health.exit_code, 1) << Describe(health);
  EXPECT_THAT(health.out, HasSubstr("GPU 2: 2 uncorrectable ECC error(s) since the driver loaded"));
  EXPECT_THAT(health.out, Not(HasSubstr("GPU 0:")));
  RunResult json = daemon.Ctl({"health", "--json"});
  EXPECT_EQ(json.exit_code, 1) << Describe(json);
  EXPECT_EQ(ParseJson(json.out)["unhealthy_gpus"], nlohmann::json::array({2}));

  RunResult check =
      daemon.Ctl({"check", "--gemm-size", "64", "--no-links", "--iterations", "2", "--json"});
  EXPECT_EQ(check.exit_code, 1) << Describe(check);
  const nlohmann::json j = ParseJson(check.out);
  EXPECT_EQ(j["unhealthy_gpus"], nlohmann::json::array({2}));
  EXPECT_EQ(j["gpus"][2]["health_problems"].size(), 2u);
  EXPECT_EQ(j["gpus"][0]["health_problems"], nlohmann::json::array());

  // Forgetting Xids: the host backend counts none, and device 9 is not there.
  RunResult forget = daemon.Ctl({"health", "--forget-xids", "2"});
  EXPECT_EQ(forget.exit_code, 3) << Describe(forget);
  EXPECT_EQ(forget.err,
            "overlapctl: FAILED_PRECONDITION: host backend counts no Xid errors (NVML does)\n");
  forget = daemon.Ctl({"health", "--forget-xids", "9"});
  EXPECT_EQ(forget.exit_code, 3) << Describe(forget);
  EXPECT_EQ(forget.err,
            "overlapctl: INVALID_ARGUMENT: forget Xids: no device 9 (the daemon has 4)\n");
  EXPECT_EQ(daemon.Ctl({"health", "--forget-xids", "-1"}).exit_code, 64);
}

}  // namespace
}  // namespace overlap::testing

namespace overlap::testing {
namespace {

// The bundled mesh graph through the real daemon: tp 2 x dp 2 on its four
// host devices, every op checked against float64, and the report's mesh and
// deferral lines.
TEST_F(DaemonTest, MeshGraphReportsEachGroupAndWhatTheLayerStepDeferred) {
  StartDaemon();
  RunResult done = daemon_->Ctl(
      {"submit", std::string(OVERLAP_SOURCE_DIR) + "/deploy/graphs/mesh-host.yaml", "--wait"});
  ASSERT_EQ(done.exit_code, 0) << Describe(done);
  EXPECT_THAT(done.out, ::testing::HasSubstr("mesh: tp 2 x dp 2; each group's step"));
  EXPECT_THAT(done.out,
              ::testing::ContainsRegex("fc2_grads \\(dp\\) [0-9.]+\\*? / [0-9.]+\\*? ms"));
  EXPECT_THAT(done.out, ::testing::HasSubstr("fc2_grads chunked 2 x 32KiB"));
  EXPECT_THAT(done.out, ::testing::HasSubstr("bucket(fc1_grads+bias_grads) bucketed"));
  EXPECT_THAT(done.out, ::testing::ContainsRegex("[0-9]+% hidden \\(layer"));
  EXPECT_THAT(done.out, ::testing::Not(::testing::HasSubstr("FAIL")));
  RunResult json = daemon_->Ctl(
      {"get", Trim(ParseJson(daemon_->Ctl({"list", "--json"}).out)["jobs"][0]["id"]), "--json"});
  ASSERT_EQ(json.exit_code, 0) << Describe(json);
  const nlohmann::json result = ParseJson(json.out)["result"];
  EXPECT_EQ(result["mesh_tp"], 2);
  EXPECT_EQ(result["mesh_dp"], 2);
  for (const nlohmann::json& op : result["ops"]) {
    EXPECT_EQ(op.value("verified", false), true) << op.dump();
  }
}

}  // namespace
}  // namespace overlap::testing

namespace overlap::testing {
namespace {

// A layer written as plain collectives and GEMMs (graph --unfused) through the
// real daemon: the overlap pass fuses every pair back, the report says so, and
// the chain fc1 -swiglu-> fc2 verifies; with submit --no-fuse it runs as
// written, verified as well, and the report says why nothing was fused.
TEST_F(DaemonTest, TheOverlapPassFusesAnUnfusedLayerUnlessToldNotTo) {
  StartDaemon();
  const std::string path = dir_.File("unfused.yaml");
  RunResult written =
      daemon_->Ctl({"graph", "--hidden", "128", "--ffn", "256", "--heads", "2", "--seq", "128",
                    "--tp", "2", "--devices", "0,1", "--unfused", "--output-file", path});
  ASSERT_EQ(written.exit_code, 0) << Describe(written);
  std::string graph = ReadFileOrEmpty(path);
  graph.replace(graph.find("iterations: 20"), 14, "iterations: 2");
  graph.replace(graph.find("warmup: 5"), 9, "warmup: 1");
  WriteFileOrDie(path, graph);
  auto run = [&](std::vector<std::string> args) {
    RunResult done = daemon_->Ctl(args);
    EXPECT_EQ(done.exit_code, 0) << Describe(done);
    const std::string id = Trim(ParseJson(daemon_->Ctl({"list", "--json"}).out)["jobs"][0]["id"]);
    return std::pair(done.out, ParseJson(daemon_->Ctl({"get", id, "--json"}).out)["result"]);
  };
  auto [text, result] = run({"submit", path, "--wait"});
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "overlap pass: fused qkv_gather + qkv into qkv (ag_gemm), proj + proj_rs "
                        "into proj (gemm_rs), fc1_gather + fc1 into fc1 (ag_gemm), fc2 + fc2_rs "
                        "into fc2 (gemm_rs)"));
  EXPECT_THAT(text, ::testing::HasSubstr("chains verified against float64: fc1 -swiglu-> fc2"));
  std::vector<std::string> types;
  for (const nlohmann::json& op : result["ops"]) {
    types.push_back(op.value("type", ""));
    EXPECT_TRUE(op.value("verified", false)) << op.dump();
  }
  EXPECT_THAT(types, ::testing::ElementsAre("ag_gemm", "gemm_rs", "ag_gemm", "gemm_rs"));

  std::tie(text, result) = run({"submit", path, "--wait", "--no-fuse"});
  EXPECT_THAT(text,
              ::testing::HasSubstr("overlap pass: left alone qkv_gather + qkv (fuse: false)"));
  EXPECT_EQ(result["ops"].size(), 8u);
  for (const nlohmann::json& op : result["ops"]) {
    EXPECT_TRUE(op.value("verified", false)) << op.dump();
  }
  // qkv_gather -> qkv, proj -> proj_rs, fc1_gather -> fc1, fc1 -swiglu-> fc2, fc2 -> fc2_rs.
  EXPECT_EQ(result["layer_chains"].size(), 5u);

  RunResult compared = daemon_->Ctl({"submit", path, "--compare-fusion"});
  ASSERT_EQ(compared.exit_code, 0) << Describe(compared);
  EXPECT_THAT(compared.out, ::testing::ContainsRegex("  fused +job-[0-9]+ +4 "));
  EXPECT_THAT(compared.out, ::testing::ContainsRegex("  unfused +job-[0-9]+ +8 "));
  EXPECT_THAT(compared.out, ::testing::HasSubstr("% layer step against unfused"));
  compared = daemon_->Ctl({"submit", path, "--compare-fusion", "--json"});
  ASSERT_EQ(compared.exit_code, 0) << Describe(compared);
  const nlohmann::json both = ParseJson(compared.out);
  EXPECT_EQ(both["fused"]["fused_pairs"], 4);
  EXPECT_EQ(both["unfused"]["ops"], 8);
  EXPECT_EQ(daemon_->Ctl({"submit", path, "--compare-fusion", "--no-fuse"}).exit_code, 64);
}

}  // namespace
}  // namespace overlap::testing
