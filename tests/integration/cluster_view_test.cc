// `overlapctl node|top|check --nodes` against real daemons on loopback: two
// host-backend daemons that list each other as peers (2 devices each), and in
// some tests a third without a peer listener or an address where nothing
// listens. Tiny sizes and few iterations.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/integration/harness.h"

namespace overlap::testing {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

struct Node {
  std::unique_ptr<TempDir> dir = std::make_unique<TempDir>();
  std::string peer;  // 127.0.0.1:PORT, or "" without a peer listener
  std::unique_ptr<Daemon> daemon;
};

class ClusterViewTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (!HasFailure()) return;
    for (const Node& n : nodes_) {
      if (n.daemon != nullptr) std::cerr << "overlapd log:\n" << n.daemon->Log();
    }
  }

  // `peered` daemons that list each other, then `plain` ones without a peer listener.
  void StartNodes(int peered, int plain = 0) {
    const std::vector<int> ports = FreeLoopbackPorts(peered);
    for (int i = 0; i < peered + plain; ++i) {
      nodes_.emplace_back();
      if (i < peered) nodes_.back().peer = absl::StrCat("127.0.0.1:", ports[i]);
    }
    const std::string key = WriteClusterKey(nodes_[0].dir->File("cluster.key"));
    std::vector<std::string> names;
    for (int i = 0; i < peered; ++i) names.push_back(nodes_[i].peer);
    const TestNodeKeys node_keys = MakeTestNodeKeys(nodes_[0].dir->path(), names);
    ASSERT_EQ(node_keys.error, "");
    for (int i = 0; i < peered + plain; ++i) {
      std::vector<std::string> flags = {"--host-devices", "2"};
      if (i < peered) {
        std::vector<std::string> peers;
        for (int j = 0; j < peered; ++j) {
          if (j != i) peers.push_back(absl::StrCat("\"", nodes_[j].peer, "\""));
        }
        const std::string config = nodes_[i].dir->File("overlapd.yaml");
        WriteFileOrDie(
            config,
            absl::StrCat("peer_listen: \"", nodes_[i].peer, "\"\npeer_key_file: \"", key, "\"\n",
                         node_keys.ConfigFor(i), "peers: [", absl::StrJoin(peers, ", "),
                         "]\ncluster_collective_timeout_ms: 4000\n"));
        flags.insert(flags.end(), {"--config", config});
      }
      nodes_[i].daemon = std::make_unique<Daemon>(nodes_[i].dir->path(), flags);
      ASSERT_TRUE(nodes_[i].daemon->Start()) << nodes_[i].daemon->Log();
    }
  }

  const std::string& address(int i) { return nodes_[i].daemon->address(); }
  std::string Addresses(const std::vector<int>& which, const std::string& extra = "") {
    std::vector<std::string> out;
    for (int i : which) out.push_back(address(i));
    if (!extra.empty()) out.push_back(extra);
    return absl::StrJoin(out, ",");
  }
  // overlapctl without --addr: --nodes names the daemons.
  RunResult Ctl(const std::vector<std::string>& args) {
    return Overlapctl(nodes_[0].dir->path(), "", args, std::chrono::seconds(60));
  }

  std::vector<Node> nodes_;
};

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

TEST_F(ClusterViewTest, NodeAndTopShowEveryDaemonAndOneThatDoesNotAnswerAsSuch) {
  ASSERT_NO_FATAL_FAILURE(StartNodes(/*peered=*/2, /*plain=*/1));
  RunResult node = Ctl({"node", "--nodes", Addresses({0, 1, 2})});
  ASSERT_EQ(node.exit_code, 0) << Describe(node);
  EXPECT_THAT(Lines(node.out)[0], HasSubstr(address(2)));
  EXPECT_THAT(node.out, HasSubstr(nodes_[1].peer));
  EXPECT_THAT(node.out, HasSubstr("- (no peer listener)"));
  EXPECT_THAT(node.out, Not(HasSubstr("MISMATCH")));
  EXPECT_THAT(Lines(node.out).back(),
              "all 3 nodes answered, run the same overlapd and NCCL, and are healthy");

  const std::string missing = "unix:" + nodes_[0].dir->File("nobody.sock");
  RunResult json = Ctl({"node", "--nodes", Addresses({0, 1}, missing), "--json"});
  EXPECT_EQ(json.exit_code, 2) << Describe(json);
  EXPECT_THAT(json.err, HasSubstr("cannot reach overlapd at " + missing));
  const nlohmann::json j = ParseJson(json.out);
  ASSERT_EQ(j["nodes"].size(), 3u);
  EXPECT_EQ(j["nodes"][1]["info"]["node_name"], nodes_[1].peer);
  EXPECT_EQ(j["nodes"][1]["info"]["cross_daemon_transport"], "gloo");
  EXPECT_FALSE(j["nodes"][2]["answered"].get<bool>());
  EXPECT_TRUE(j["nodes"][2]["error"]["unreachable"].get<bool>());
  EXPECT_FALSE(j["version_mismatch"].get<bool>());
  EXPECT_FALSE(j["nccl_mismatch"].get<bool>());
  EXPECT_EQ(j["unanswered_nodes"], nlohmann::json({missing}));

  RunResult top = Ctl({"top", "--nodes", Addresses({0, 1}, missing), "--count", "1"});
  EXPECT_EQ(top.exit_code, 2) << Describe(top);
  const std::vector<std::string> lines = Lines(top.out);
  ASSERT_EQ(lines.size(), 6u) << top.out;  // the header, 2 GPUs of 2 nodes, the missing one
  EXPECT_THAT(lines[0], HasSubstr(" NODE "));
  EXPECT_THAT(lines[3], HasSubstr(address(1)));
  EXPECT_THAT(lines[5], HasSubstr("no answer: cannot reach overlapd"));
  RunResult top_json = Ctl({"top", "--nodes", Addresses({0, 1}), "--count", "1", "--json"});
  EXPECT_EQ(top_json.exit_code, 0) << Describe(top_json);
  const nlohmann::json sample = ParseJson(top_json.out);
  ASSERT_EQ(sample["nodes"].size(), 2u);
  EXPECT_EQ(sample["nodes"][1]["devices"].size(), 2u);

  // --nodes names the daemons: an --addr beside it must be one of them.
  RunResult other =
      Overlapctl(nodes_[0].dir->path(), address(2), {"node", "--nodes", Addresses({0, 1})});
  EXPECT_EQ(other.exit_code, 64) << Describe(other);
  EXPECT_THAT(other.err, HasSubstr("is not among the nodes (--nodes, --cluster-file)"));
  RunResult among =
      Overlapctl(nodes_[0].dir->path(), address(1), {"node", "--nodes", Addresses({0, 1})});
  EXPECT_EQ(among.exit_code, 0) << Describe(among);
  RunResult twice = Ctl({"node", "--nodes", Addresses({0, 0})});
  EXPECT_EQ(twice.exit_code, 64) << Describe(twice);
  EXPECT_THAT(twice.err, HasSubstr("given twice"));
}

TEST_F(ClusterViewTest, CheckRunsEachNodesGemmAndAVerifiedAllReduceBetweenThem) {
  ASSERT_NO_FATAL_FAILURE(StartNodes(/*peered=*/2, /*plain=*/1));
  RunResult check = Ctl({"check", "--nodes", Addresses({0, 1}), "--iterations", "2", "--json"});
  ASSERT_EQ(check.exit_code, 0) << Describe(check);
  const nlohmann::json j = ParseJson(check.out);
  EXPECT_FALSE(j["timings_judged"].get<bool>());  // the host backend
  ASSERT_EQ(j["nodes"].size(), 2u);
  for (const nlohmann::json& node : j["nodes"]) {
    ASSERT_EQ(node["gpus"].size(), 2u) << node.dump(1);
    EXPECT_GT(node["gpus"][1]["gemm_ms"].get<double>(), 0);
  }
  EXPECT_EQ(j["nodes"][1]["peer"], nodes_[1].peer);
  ASSERT_EQ(j["pairs"].size(), 1u);
  const nlohmann::json& pair = j["pairs"][0];
  EXPECT_EQ(pair["a"], address(0));
  EXPECT_GT(pair["busbw_gbps"].get<double>(), 0) << pair.dump(1);
  EXPECT_TRUE(pair.value("verified", false)) << pair.dump(1);
  EXPECT_LE(pair["max_rel_error"].get<double>(), pair["tolerance"].get<double>());
  EXPECT_EQ(j["pair_devices"], 2);
  EXPECT_EQ(j["slow_nodes"], nlohmann::json::array());
  EXPECT_EQ(j["failed_links"], nlohmann::json::array());
  // The pair ran as one job over both daemons, coordinated by the first.
  RunResult get = nodes_[0].daemon->Ctl({"get", pair["job"].get<std::string>(), "--json"});
  ASSERT_EQ(get.exit_code, 0) << Describe(get);
  const nlohmann::json job = ParseJson(get.out);
  EXPECT_EQ(job["result"]["node_results"].size(), 2u);
  EXPECT_TRUE(job["result"]["ops"][0].value("spans_nodes", false));

  // A daemon without a peer listener: its GEMMs run, its pair is said not checked.
  RunResult text = Ctl({"check", "--nodes", Addresses({0, 2}), "--iterations", "2"});
  EXPECT_EQ(text.exit_code, 0) << Describe(text);
  EXPECT_EQ(text.out.rfind("host backend: these timings", 0), 0u) << text.out;
  EXPECT_THAT(text.out, HasSubstr(absl::StrCat("not checked: ", address(0), " - ", address(2), ": ",
                                               address(2), " has no peer listener")));
  // Its row: the pair as one word, nothing verified, and why not in one word.
  EXPECT_THAT(text.out, HasSubstr(absl::StrCat(address(0), ",", address(2), "  -  ")));
  EXPECT_THAT(text.out, ContainsRegex(" +- +- +NOT_CHECKED\n"));
  EXPECT_THAT(text.out, Not(HasSubstr("SLOW")));
}

}  // namespace
}  // namespace overlap::testing
