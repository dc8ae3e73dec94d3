// The flight recorder across daemons, with two real host daemons on
// loopback: a job that fails on one node, or loses a node that stops
// answering, gets its coordinator's verdict over every node's rings.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/integration/cluster_harness.h"

namespace overlap::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kCollectiveTimeoutMs = 10000;

class ClusterFlightTest : public ClusterFixture {
 protected:
  ClusterFlightTest() : ClusterFixture(kCollectiveTimeoutMs) {}
  ~ClusterFlightTest() override {
    // A stopped daemon cannot die of SIGTERM: let it run before the harness ends it.
    for (ClusterNode& node : nodes_) {
      if (node.daemon != nullptr && node.daemon->running()) kill(node.daemon->pid(), SIGCONT);
    }
  }

  // Two nodes of two host devices, each listing the other; `extra[i]` is
  // added to node i's config.
  void StartNodes(const std::vector<std::string>& extra) {
    ClusterFixture::StartNodes(2, 2, {}, 3000, extra);
  }

  // Submits `text` on node 0 over both nodes; the job id.
  std::string Submit(const std::string& name, const std::string& text) {
    return ClusterFixture::Submit(0, WriteGraph(name, text), Nodes({0, 1}));
  }
};

// Node B's third all-gather fails (the injected NCCL failure): its ranks
// never reach the gradient all-reduce that node A's ranks wait in. The
// coordinator reads both nodes' rings and names node B's ranks and the seq.
TEST_F(ClusterFlightTest, TheCoordinatorsVerdictNamesTheRankOfTheNodeThatDidNotCome) {
  ASSERT_NO_FATAL_FAILURE(StartNodes({"", "host_fail_op: all_gather\nhost_fail_after: 3\n"}));
  const std::string id = Submit("layer.yaml", kMeshLayer);
  const nlohmann::json job = PollJob(daemon(0), id, Final, std::chrono::seconds(120));
  ASSERT_EQ(job.value("state", ""), "ABORTED") << job.dump(2) << Logs();
  const std::string error = job.value("error", "");
  EXPECT_THAT(error, HasSubstr("injected NCCL failure")) << error;
  EXPECT_THAT(error, HasSubstr("; flight: ")) << error;
  const std::string verdict = error.substr(error.find("flight: "));
  // The world barrier before fc1's next round: node A's ranks reached it,
  // node B's stopped at the one before (their all-gather failed in between).
  const std::string key = peer(0) + "/" + id;
  EXPECT_EQ(verdict, absl::StrCat("flight: collective #7 barrier (channel 0 ranks [0,1,2,3] of ",
                                  key, ", critical lane, op fc1) not reached by rank(s) 2 on node ",
                                  peer(1), " (last #6 barrier enqueued), 3 on node ", peer(1),
                                  " (last #6 barrier enqueued); reached by 0,1 on node ", peer(0)));

  // `overlapctl flight` on the coordinator: both nodes' rings, its verdict.
  RunResult flight = daemon(0).Ctl({"flight", id, "--json"});
  ASSERT_EQ(flight.exit_code, 0) << flight.err;
  const nlohmann::json rings = ParseJson(flight.out);
  EXPECT_EQ(rings.value("verdict", ""), verdict);
  std::set<std::string> nodes;
  std::set<int> ranks;
  for (const nlohmann::json& ring : rings["rings"]) {
    nodes.insert(ring.value("node", ""));
    ranks.insert(ring.value("rank", -1));
    // Ranks 0,1 live on node A, 2,3 on node B: each node records its own.
    EXPECT_EQ(ring.value("node", ""), peer(ring.value("rank", 0) / 2)) << ring.dump();
  }
  EXPECT_EQ(nodes, (std::set<std::string>{peer(0), peer(1)}));
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));
  EXPECT_TRUE(!rings.contains("unread_nodes") || rings["unread_nodes"].empty()) << rings.dump();
  // What the rings hold, in `overlapctl node` (text and JSON).
  const nlohmann::json node = ParseJson(daemon(1).Ctl({"node", "--json"}).out);
  const nlohmann::json& usage = node["flight_recorder"];
  auto count = [&](const char* key) -> int64_t {
    const nlohmann::json& v = usage[key];
    return v.is_string() ? std::stoll(v.get<std::string>()) : v.get<int64_t>();
  };
  EXPECT_GT(count("entries"), 0) << usage.dump();
  EXPECT_GT(count("bytes"), 0) << usage.dump();
  EXPECT_GE(count("cap_bytes"), count("bytes")) << usage.dump();
  EXPECT_EQ(usage.value("entries_per_ring", 0), 2000);
  EXPECT_THAT(daemon(1).Ctl({"node"}).out, HasSubstr(" collectives in "));

  RunResult text = daemon(0).Ctl({"flight", id});
  EXPECT_THAT(text.out, HasSubstr(absl::StrCat("rank 3 on node ", peer(1)))) << text.out;
}

// `text` matched literally in a std::regex.
std::string Literal(const std::string& text) {
  static const std::regex kSpecial(R"([.^$|()\[\]{}*+?\\/])");
  return std::regex_replace(text, kSpecial, R"(\$&)");
}

// Node B stops answering mid-job (SIGSTOP): the coordinator's verdict says
// its rings could not be read, and judges node A's. Node A's ranks were cut
// off waiting for B's in a collective across the nodes: their Synchronize
// failed, so node A's rings keep it aborted (the clean drain after it does
// not finish it) and the verdict names it, with B's ranks it could not read.
TEST_F(ClusterFlightTest, TheVerdictNamesTheNodeWhoseRingsCouldNotBeRead) {
  ASSERT_NO_FATAL_FAILURE(StartNodes({"", ""}));
  const std::string id = Submit("long.yaml", kLongLayer);
  ASSERT_FALSE(PollJob(daemon(0), id, StateIs("RUNNING")).is_null());
  // Until node B's part is running too.
  ASSERT_FALSE(WaitForPart(1, "RUNNING").is_null()) << Logs();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(kill(daemon(1).pid(), SIGSTOP), 0);
  const nlohmann::json job = PollJob(daemon(0), id, Final, std::chrono::seconds(120));
  kill(daemon(1).pid(), SIGCONT);
  EXPECT_THAT(job.value("state", ""), ::testing::AnyOf("FAILED", "ABORTED")) << job.dump(2);
  const std::string error = job.value("error", "");
  ASSERT_THAT(error, HasSubstr("; flight: ")) << error << Logs();
  const std::string verdict = error.substr(error.find("flight: "));
  // The collective node A's ranks were in, its seq, the ranks of node A that
  // were cut off in it, and node B's ranks of its group, whose rings were
  // not read.
  const std::string key = peer(0) + "/" + id;
  const std::regex expected(absl::StrCat(
      Literal(absl::StrCat("flight: rings of node ", peer(1), " (DEADLINE_EXCEEDED: node ", peer(1),
                           ": Deadline Exceeded) could not be read; collective #")),
      R"re((\d+) (all_reduce|barrier) \((channel \d+ ranks \[[0-9,]+\] ))re",
      Literal(absl::StrCat("of ", key, ", critical lane, op grads) reached by ")), R"(([0-9,]+))",
      Literal(absl::StrCat(" on node ", peer(0), ", aborted on ")), R"(\4)",
      Literal(absl::StrCat(" on node ", peer(0), "; nothing read from rank(s) ")), R"(([0-9,]+))"));
  RecordProperty("verdict", verdict);  // in --gtest_output=xml, for the docs' example
  std::smatch match;
  ASSERT_TRUE(std::regex_match(verdict, match, expected)) << verdict << Logs();
  const uint64_t seq = std::stoull(match[1].str());
  const std::string comm = absl::StrCat(match[3].str(), "of ", key);
  // Node A's ranks are 0,1; node B's 2,3.
  for (const std::string& rank : std::vector<std::string>(absl::StrSplit(match[4].str(), ','))) {
    EXPECT_LT(std::stoi(rank), 2) << verdict;
  }
  for (const std::string& rank : std::vector<std::string>(absl::StrSplit(match[5].str(), ','))) {
    EXPECT_GE(std::stoi(rank), 2) << verdict;
  }

  // Node A's rings as `overlapctl flight` shows them: that collective aborted
  // with the error and a time, everything before it on its communicator
  // finished, nothing after it finished.
  RunResult flight = daemon(0).Ctl({"flight", id, "--json"});
  ASSERT_EQ(flight.exit_code, 0) << flight.err;
  const nlohmann::json rings = ParseJson(flight.out);
  auto as_int = [](const nlohmann::json& v) -> int64_t {
    if (v.is_null()) return 0;
    return v.is_string() ? std::stoll(v.get<std::string>()) : v.get<int64_t>();
  };
  int aborted = 0;
  for (const nlohmann::json& ring : rings["rings"]) {
    if (ring.value("node", "") != peer(0) || ring.value("comm", "") != comm) continue;
    for (const nlohmann::json& e : ring["entries"]) {
      const uint64_t at = static_cast<uint64_t>(as_int(e["seq"]));
      const std::string state = e.value("state", "");
      if (at < seq) EXPECT_EQ(state, "finished") << e.dump();
      if (at > seq) EXPECT_NE(state, "finished") << e.dump();
      if (at != seq) continue;
      ++aborted;
      EXPECT_EQ(state, "aborted") << e.dump();
      EXPECT_THAT(e.value("error", ""), ::testing::Not(::testing::IsEmpty())) << e.dump();
      EXPECT_GE(as_int(e["finished_unix_ns"]), as_int(e["enqueued_unix_ns"])) << e.dump();
      EXPECT_GT(as_int(e["finished_unix_ns"]), 0) << e.dump();
    }
  }
  EXPECT_GT(aborted, 0) << rings.dump(1);
  EXPECT_THAT(daemon(0).Ctl({"flight", id}).out, HasSubstr(" aborted "));
}

// A job's Chrome trace carries its flight rings on a "flight" track per rank.
TEST_F(ClusterFlightTest, TheChromeTraceHasAFlightTrackPerRank) {
  ASSERT_NO_FATAL_FAILURE(StartNodes({"", ""}));
  const std::string graph = nodes_[0].dir->File("local.yaml");
  WriteFileOrDie(graph, R"(name: local
iterations: 2
warmup: 1
ops:
  - {id: fc1, type: ag_gemm, m: 128, k: 64, n: 64}
)");
  RunResult submit = daemon(0).Ctl({"submit", graph, "--wait"});
  ASSERT_EQ(submit.exit_code, 0) << submit.err << submit.out;
  const nlohmann::json jobs = ParseJson(daemon(0).Ctl({"list", "--json"}).out)["jobs"];
  ASSERT_EQ(jobs.size(), 1u);
  const std::string id = jobs[0].value("id", "");
  const std::string trace = nodes_[0].dir->File("trace.json");
  RunResult written = daemon(0).Ctl({"timeline", id, "--output-file", trace, "--flight"});
  ASSERT_EQ(written.exit_code, 0) << written.err;
  const nlohmann::json events = ParseJson(ReadFileOrEmpty(trace))["traceEvents"];
  std::set<int> ranks;
  int collectives = 0;
  for (const nlohmann::json& e : events) {
    if (e.value("cat", "") != "flight") continue;
    ++collectives;
    ranks.insert(e.value("pid", -1));
    EXPECT_EQ(e["args"].value("lane", ""), "critical") << e.dump();
    EXPECT_EQ(e.value("name", "").rfind("#", 0), 0u) << e.dump();
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1}));
  EXPECT_GT(collectives, 0);
}

}  // namespace
}  // namespace overlap::testing
