// A cluster of real host daemons on loopback, for the tests of jobs that span
// daemons: each with its own state dir, unix socket and peer listener, its peer
// port chosen before any starts so that every daemon's peers: can name the
// others. Header only, like harness.h.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/integration/harness.h"

namespace overlap::testing {

// A tp 2 x dp 2 layer over two nodes of two devices: each replica's tp group
// on one node, the gradient all-reduce (dp) across the nodes.
inline constexpr char kMeshLayer[] = R"(name: mesh-layer
mesh: {tp: 2, dp: 2}
iterations: 3
warmup: 1
dtype: bf16
ops:
  - {id: fc1, type: ag_gemm, m: 128, k: 64, n: 64}
  - {id: fc2, type: gemm_rs, m: 128, k: 64, n: 64, after: [fc1]}
  - {id: grads, type: all_reduce, m: 64, n: 64, group: dp, after: [fc2]}
)";

// Long enough to be caught running: many iterations of a dp all-reduce.
inline constexpr char kLongLayer[] = R"(name: long
mesh: {tp: 2, dp: 2}
iterations: 5000
warmup: 1
verify: false
layer_step: false
ops:
  - {id: grads, type: all_reduce, m: 256, n: 256, group: dp}
)";

// Whether a job (as `get --json` or `list --json` shows it) has ended.
inline bool Final(const nlohmann::json& job) {
  const std::string state = job.value("state", "");
  return state == "SUCCEEDED" || state == "FAILED" || state == "CANCELLED" || state == "ABORTED";
}

// One daemon of the cluster.
struct ClusterNode {
  std::unique_ptr<TempDir> dir = std::make_unique<TempDir>();
  std::string peer;  // 127.0.0.1:PORT
  std::unique_ptr<Daemon> daemon;
};

class ClusterFixture : public ::testing::Test {
 protected:
  // Each daemon's cluster_collective_timeout_ms.
  explicit ClusterFixture(int collective_timeout_ms)
      : collective_timeout_ms_(collective_timeout_ms) {}

  // `devices` host devices each; every node lists every other as a peer,
  // except those in `unlisted` (by index), which nobody lists. `extra[i]`,
  // where given, ends node i's config.
  void StartNodes(int count, int devices = 2, std::vector<int> unlisted = {},
                  int hold_timeout_ms = 3000, std::vector<std::string> extra = {}) {
    key_ = WriteClusterKey(key_dir_.File("cluster.key"));
    for (int port : FreeLoopbackPorts(count)) {
      ClusterNode node;
      node.peer = absl::StrCat("127.0.0.1:", port);
      nodes_.push_back(std::move(node));
    }
    std::vector<std::string> names;
    for (const ClusterNode& node : nodes_) names.push_back(node.peer);
    node_keys_ = MakeTestNodeKeys(key_dir_.path(), names);
    ASSERT_EQ(node_keys_.error, "");
    for (int i = 0; i < count; ++i) {
      std::vector<std::string> peers;
      for (int j = 0; j < count; ++j) {
        const bool listed = std::find(unlisted.begin(), unlisted.end(), j) == unlisted.end();
        if (j != i && listed) peers.push_back(absl::StrCat("\"", nodes_[j].peer, "\""));
      }
      const std::string config = nodes_[i].dir->File("overlapd.yaml");
      WriteFileOrDie(
          config,
          absl::StrCat("peer_listen: \"", nodes_[i].peer, "\"\n", "peer_key_file: \"", key_, "\"\n",
                       node_keys_.ConfigFor(i), "peers: [", absl::StrJoin(peers, ", "), "]\n",
                       "cluster_hold_timeout_ms: ", hold_timeout_ms, "\n",
                       "cluster_collective_timeout_ms: ", collective_timeout_ms_, "\n",
                       i < static_cast<int>(extra.size()) ? extra[i] : ""));
      nodes_[i].daemon = std::make_unique<Daemon>(
          nodes_[i].dir->path(),
          std::vector<std::string>{"--config", config, "--host-devices", absl::StrCat(devices)});
      ASSERT_TRUE(nodes_[i].daemon->Start()) << nodes_[i].daemon->Log();
    }
  }

  Daemon& daemon(int i) { return *nodes_[i].daemon; }
  const std::string& peer(int i) { return nodes_[i].peer; }

  // The peer addresses of nodes `which`, comma-separated (submit --peers).
  std::string Nodes(std::vector<int> which) {
    std::vector<std::string> out;
    for (int i : which) out.push_back(nodes_[i].peer);
    return absl::StrJoin(out, ",");
  }

  // Writes `text` into node 0's directory; its path.
  std::string WriteGraph(const std::string& name, const std::string& text) {
    const std::string path = nodes_[0].dir->File(name);
    WriteFileOrDie(path, text);
    return path;
  }

  // Submits on node `coordinator` over `nodes`; the job id.
  std::string Submit(int coordinator, const std::string& graph, const std::string& nodes) {
    RunResult submit = daemon(coordinator).Ctl({"submit", graph, "--peers", nodes});
    EXPECT_EQ(submit.exit_code, 0) << submit.err;
    return Trim(submit.out);
  }

  // The jobs of node `i` (summaries).
  nlohmann::json List(int i) {
    RunResult list = daemon(i).Ctl({"list", "--json"});
    EXPECT_EQ(list.exit_code, 0) << list.err;
    return ParseJson(list.out)["jobs"];
  }

  // Waits until node `i` has a part (a job with a coordinator) in `state`.
  nlohmann::json WaitForPart(int i, const std::string& state,
                             std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    const auto deadline = Clock::now() + timeout;
    nlohmann::json seen;
    while (Clock::now() < deadline) {
      seen = List(i);
      for (const nlohmann::json& job : seen) {
        if (!job.value("coordinator", "").empty() && job.value("state", "") == state) return job;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "no part " << state << " on node " << i << ": " << seen.dump(2);
    return {};
  }

  // Every daemon's log, for a failure's message.
  std::string Logs() {
    std::string out;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      absl::StrAppend(&out, "\n--- node ", i, " log:\n", nodes_[i].daemon->Log());
    }
    return out;
  }

  TempDir key_dir_;
  std::string key_;                 // the cluster key every node shares
  TestNodeKeys node_keys_;          // each node's own key, and the file listing them all
  std::vector<ClusterNode> nodes_;  // last: its daemons stop before the key dir goes

 private:
  const int collective_timeout_ms_;
};

}  // namespace overlap::testing
