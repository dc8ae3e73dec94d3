// The flight recorder across daemons, with two real host daemons on
// loopback: a job that fails on one node, or loses a node that stops
// answering, gets its coordinator's verdict over every node's rings.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/integration/harness.h"

namespace overlap::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kCollectiveTimeoutMs = 10000;

// A tp 2 x dp 2 layer over two nodes of two devices: each tp group's
// all-gathers on one node, the gradient all-reduce (dp) across the nodes.
constexpr char kMeshLayer[] = R"(name: mesh-layer
mesh: {tp: 2, dp: 2}
iterations: 3
warmup: 1
dtype: bf16
ops:
  - {id: fc1, type: ag_gemm, m: 128, k: 64, n: 64}
  - {id: fc2, type: gemm_rs, m: 128, k: 64, n: 64, after: [fc1]}
  - {id: grads, type: all_reduce, m: 64, n: 64, group: dp, after: [fc2]}
)";

// Long enough to be caught running.
constexpr char kLongLayer[] = R"(name: long
mesh: {tp: 2, dp: 2}
iterations: 5000
warmup: 1
verify: false
layer_step: false
ops:
  - {id: grads, type: all_reduce, m: 256, n: 256, group: dp}
)";

bool Final(const nlohmann::json& job) {
  const std::string state = job.value("state", "");
  return state == "SUCCEEDED" || state == "FAILED" || state == "CANCELLED" || state == "ABORTED";
}

class ClusterFlightTest : public ::testing::Test {
 protected:
  ~ClusterFlightTest() override {
    // A stopped daemon cannot die of SIGTERM: let it run before the harness ends it.
    for (auto& daemon : daemons_) {
      if (daemon != nullptr && daemon->running()) kill(daemon->pid(), SIGCONT);
    }
  }

  // Two nodes of two host devices, each listing the other; `extra[i]` is
  // added to node i's config.
  void StartNodes(const std::vector<std::string>& extra) {
    key_ = WriteClusterKey(key_dir_.File("cluster.key"));
    for (int port : FreeLoopbackPorts(2)) peers_.push_back(absl::StrCat("127.0.0.1:", port));
    node_keys_ = MakeTestNodeKeys(key_dir_.path(), peers_);
    ASSERT_EQ(node_keys_.error, "");
    for (int i = 0; i < 2; ++i) {
      dirs_.push_back(std::make_unique<TempDir>());
      const std::string config = dirs_[i]->File("overlapd.yaml");
      WriteFileOrDie(config, absl::StrCat("peer_listen: \"", peers_[i], "\"\n", "peer_key_file: \"",
                                          key_, "\"\n", node_keys_.ConfigFor(i), "peers: [\"",
                                          peers_[1 - i], "\"]\n", "cluster_hold_timeout_ms: 3000\n",
                                          "cluster_collective_timeout_ms: ", kCollectiveTimeoutMs,
                                          "\n", extra[i]));
      daemons_.push_back(std::make_unique<Daemon>(
          dirs_[i]->path(), std::vector<std::string>{"--config", config, "--host-devices", "2"}));
      ASSERT_TRUE(daemons_[i]->Start()) << daemons_[i]->Log();
    }
  }

  std::string Submit(const std::string& name, const std::string& text) {
    const std::string path = dirs_[0]->File(name);
    WriteFileOrDie(path, text);
    RunResult submit = daemons_[0]->Ctl({"submit", path, "--peers", absl::StrJoin(peers_, ",")});
    EXPECT_EQ(submit.exit_code, 0) << submit.err;
    return Trim(submit.out);
  }

  std::string Logs() {
    std::string out;
    for (size_t i = 0; i < daemons_.size(); ++i) {
      absl::StrAppend(&out, "\n--- node ", i, " log:\n", daemons_[i]->Log());
    }
    return out;
  }

  TempDir key_dir_;
  std::string key_;
  TestNodeKeys node_keys_;
  std::vector<std::string> peers_;
  std::vector<std::unique_ptr<TempDir>> dirs_;
  std::vector<std::unique_ptr<Daemon>> daemons_;
};

// Node B's third all-gather fails (the injected NCCL failure): its ranks
// never reach the gradient all-reduce that node A's ranks wait in. The
// coordinator reads both nodes' rings and names node B's ranks and the seq.
TEST_F(ClusterFlightTest, TheCoordinatorsVerdictNamesTheRankOfTheNodeThatDidNotCome) {
  ASSERT_NO_FATAL_FAILURE(StartNodes({"", "host_fail_op: all_gather\nhost_fail_after: 3\n"}));
  const std::string id = Submit("layer.yaml", kMeshLayer);
  const nlohmann::json job = PollJob(*daemons_[0], id, Final, std::chrono::seconds(120));
  ASSERT_EQ(job.value("state", ""), "ABORTED") << job.dump(2) << Logs();
  const std::string error = job.value("error", "");
  EXPECT_THAT(error, HasSubstr("injected NCCL failure")) << error;
  EXPECT_THAT(error, HasSubstr("; flight: ")) << error;
  const std::string verdict = error.substr(error.find("flight: "));
  // The world barrier before fc1's next round: node A's ranks reached it,
  // node B's stopped at the one before (their all-gather failed in between).
  const std::string key = peers_[0] + "/" + id;
  EXPECT_EQ(verdict,
            absl::StrCat("flight: collective #7 barrier (channel 0 ranks [0,1,2,3] of ", key,
                         ", critical lane, op fc1) not reached by rank(s) 2 on node ", peers_[1],
                         " (last #6 barrier enqueued), 3 on node ", peers_[1],
                         " (last #6 barrier enqueued); reached by 0,1 on node ", peers_[0]));

  // `overlapctl flight` on the coordinator: both nodes' rings, its verdict.
  RunResult flight = daemons_[0]->Ctl({"flight", id, "--json"});
  ASSERT_EQ(flight.exit_code, 0) << flight.err;
  const nlohmann::json rings = ParseJson(flight.out);
  EXPECT_EQ(rings.value("verdict", ""), verdict);
  std::set<std::string> nodes;
  std::set<int> ranks;
  for (const nlohmann::json& ring : rings["rings"]) {
    nodes.insert(ring.value("node", ""));
    ranks.insert(ring.value("rank", -1));
    // Ranks 0,1 live on node A, 2,3 on node B: each node records its own.
    EXPECT_EQ(ring.value("node", ""), peers_[ring.value("rank", 0) / 2]) << ring.dump();
  }
  EXPECT_EQ(nodes, (std::set<std::string>{peers_[0], peers_[1]}));
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));
  EXPECT_TRUE(!rings.contains("unread_nodes") || rings["unread_nodes"].empty()) << rings.dump();
  // What the rings hold, in `overlapctl node` (text and JSON).
  const nlohmann::json node = ParseJson(daemons_[1]->Ctl({"node", "--json"}).out);
  const nlohmann::json& usage = node["flight_recorder"];
  auto count = [&](const char* key) -> int64_t {
    const nlohmann::json& v = usage[key];
    return v.is_string() ? std::stoll(v.get<std::string>()) : v.get<int64_t>();
  };
  EXPECT_GT(count("entries"), 0) << usage.dump();
  EXPECT_GT(count("bytes"), 0) << usage.dump();
  EXPECT_GE(count("cap_bytes"), count("bytes")) << usage.dump();
  EXPECT_EQ(usage.value("entries_per_ring", 0), 2000);
  EXPECT_THAT(daemons_[1]->Ctl({"node"}).out, HasSubstr(" collectives in "));

  RunResult text = daemons_[0]->Ctl({"flight", id});
  EXPECT_THAT(text.out, HasSubstr(absl::StrCat("rank 3 on node ", peers_[1]))) << text.out;
}

// Node B stops answering mid-job (SIGSTOP): the coordinator's verdict says
// its rings could not be read, and judges node A's.
TEST_F(ClusterFlightTest, TheVerdictNamesTheNodeWhoseRingsCouldNotBeRead) {
  ASSERT_NO_FATAL_FAILURE(StartNodes({"", ""}));
  const std::string id = Submit("long.yaml", kLongLayer);
  ASSERT_FALSE(PollJob(*daemons_[0], id, StateIs("RUNNING")).is_null());
  // Until node B's part is running too.
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  bool running = false;
  while (!running && Clock::now() < deadline) {
    const nlohmann::json list = ParseJson(daemons_[1]->Ctl({"list", "--json"}).out);
    for (const nlohmann::json& j : list["jobs"]) {
      running =
          running || (!j.value("coordinator", "").empty() && j.value("state", "") == "RUNNING");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(running) << Logs();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(kill(daemons_[1]->pid(), SIGSTOP), 0);
  const nlohmann::json job = PollJob(*daemons_[0], id, Final, std::chrono::seconds(120));
  kill(daemons_[1]->pid(), SIGCONT);
  EXPECT_THAT(job.value("state", ""), ::testing::AnyOf("FAILED", "ABORTED")) << job.dump(2);
  const std::string error = job.value("error", "");
  ASSERT_THAT(error, HasSubstr("; flight: ")) << error << Logs();
  const std::string verdict = error.substr(error.find("flight: "));
  // Node A's own rings are judged beside it (node B's ranks stopped in no
  // collective of A's: A's last ones all finished).
  EXPECT_EQ(verdict, absl::StrCat("flight: rings of node ", peers_[1], " (DEADLINE_EXCEEDED: node ",
                                  peers_[1],
                                  ": Deadline Exceeded) could not be read; every "
                                  "recorded collective finished on every rank"));
}

// A job's Chrome trace carries its flight rings on a "flight" track per rank.
TEST_F(ClusterFlightTest, TheChromeTraceHasAFlightTrackPerRank) {
  ASSERT_NO_FATAL_FAILURE(StartNodes({"", ""}));
  const std::string graph = dirs_[0]->File("local.yaml");
  WriteFileOrDie(graph, R"(name: local
iterations: 2
warmup: 1
ops:
  - {id: fc1, type: ag_gemm, m: 128, k: 64, n: 64}
)");
  RunResult submit = daemons_[0]->Ctl({"submit", graph, "--wait"});
  ASSERT_EQ(submit.exit_code, 0) << submit.err << submit.out;
  const nlohmann::json jobs = ParseJson(daemons_[0]->Ctl({"list", "--json"}).out)["jobs"];
  ASSERT_EQ(jobs.size(), 1u);
  const std::string id = jobs[0].value("id", "");
  const std::string trace = dirs_[0]->File("trace.json");
  RunResult written = daemons_[0]->Ctl({"timeline", id, "--output-file", trace, "--flight"});
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
