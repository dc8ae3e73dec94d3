// `overlapctl node --nodes` and `top --nodes`: several daemons side by side,
// what disagrees or is unhealthy flagged, and a daemon that did not answer
// shown as such.
#include "client/views/cluster_view.h"

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/views/top.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kNowMs = int64_t{1796093933} * 1000 + 250;  // 02:58:53 UTC

v1::GetNodeInfoResponse Info(const std::string& peer, const std::string& commit,
                             const std::string& nccl) {
  v1::GetNodeInfoResponse node;
  node.set_backend("cuda");
  node.set_overlapd_version("0.1.0");
  node.set_git_commit(commit);
  node.set_nccl_version(nccl);
  node.set_hostname("h-" + peer);
  node.set_node_name(peer);
  node.set_healthy(true);
  node.set_cross_daemon_transport("gloo");
  for (int i = 0; i < 2; ++i) {
    v1::Device* d = node.add_devices();
    d->set_index(i);
    d->set_name("NVIDIA H200");
    d->set_ecc_valid(true);
  }
  return node;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// The table row whose first cell is `title`, split on runs of spaces.
std::vector<std::string> Row(const std::string& text, const std::string& title) {
  for (const std::string& line : Lines(text)) {
    if (line.rfind(title + "  ", 0) != 0) continue;
    std::vector<std::string> cells;
    for (absl::string_view cell :
         absl::StrSplit(line.substr(title.size()), "  ", absl::SkipWhitespace())) {
      cells.emplace_back(absl::StripAsciiWhitespace(cell));
    }
    return cells;
  }
  return {};
}

TEST(ClusterNodeTest, NodesThatAgreeAndAreHealthyHaveNoFindings) {
  const std::vector<NodeAnswer> nodes = {{"unix:/a", Info("10.0.0.1:7071", "abc", "2.21.5")},
                                         {"unix:/b", Info("10.0.0.2:7071", "abc", "2.21.5")}};
  const ClusterFindings f = FindClusterProblems(nodes);
  EXPECT_FALSE(f.version_mismatch);
  EXPECT_FALSE(f.nccl_mismatch);
  EXPECT_TRUE(f.unhealthy.empty());
  EXPECT_TRUE(f.lines.empty());
  const std::string text = FormatClusterNodes(nodes);
  EXPECT_THAT(Lines(text)[0], HasSubstr("unix:/a"));
  EXPECT_THAT(Row(text, "overlapd"), ElementsAre("0.1.0 (abc)", "0.1.0 (abc)"));
  EXPECT_THAT(Row(text, "peer name"), ElementsAre("10.0.0.1:7071", "10.0.0.2:7071"));
  EXPECT_THAT(Row(text, "devices"), ElementsAre("2 x NVIDIA H200", "2 x NVIDIA H200"));
  EXPECT_THAT(Row(text, "GPU health"), ElementsAre("ok", "ok"));
  EXPECT_THAT(Lines(text).back(),
              "all 2 nodes answered, run the same overlapd and NCCL, and are healthy");
}

TEST(ClusterNodeTest, AVersionOrNcclMismatchIsFlaggedNamingWhoRunsWhat) {
  const std::vector<NodeAnswer> nodes = {{"unix:/a", Info("p1", "abc", "2.21.5")},
                                         {"unix:/b", Info("p2", "abc", "2.21.5")},
                                         {"unix:/c", Info("p3", "def", "2.19.3")}};
  const ClusterFindings f = FindClusterProblems(nodes);
  EXPECT_TRUE(f.version_mismatch);
  EXPECT_TRUE(f.nccl_mismatch);
  EXPECT_THAT(f.lines, ElementsAre("version mismatch: overlapd 0.1.0 (abc) on unix:/a, unix:/b; "
                                   "0.1.0 (def) on unix:/c",
                                   "NCCL mismatch: 2.21.5 on unix:/a, unix:/b; 2.19.3 on unix:/c"));
  const std::string text = FormatClusterNodes(nodes);
  EXPECT_THAT(Row(text, "overlapd"),
              ElementsAre("0.1.0 (abc)", "0.1.0 (abc)", "0.1.0 (def)", "MISMATCH"));
  EXPECT_THAT(Row(text, "nccl"), ElementsAre("2.21.5", "2.21.5", "2.19.3", "MISMATCH"));
  EXPECT_THAT(Row(text, "healthy"), ElementsAre("yes", "yes", "yes"));

  // The commit alone differs: still a mismatch (a rebuilt daemon of the same version).
  const ClusterFindings commit = FindClusterProblems(
      {{"unix:/a", Info("p1", "abc", "2.21.5")}, {"unix:/b", Info("p2", "abd", "2.21.5")}});
  EXPECT_TRUE(commit.version_mismatch);
  EXPECT_FALSE(commit.nccl_mismatch);
}

TEST(ClusterNodeTest, UnhealthyNodesAreFlaggedWithEachProblem) {
  v1::GetNodeInfoResponse draining = Info("p1", "abc", "2.21.5");
  draining.set_healthy(false);
  v1::GetNodeInfoResponse ecc = Info("p2", "abc", "2.21.5");
  ecc.mutable_devices(1)->set_ecc_uncorrected(3);
  const std::vector<NodeAnswer> nodes = {
      {"unix:/a", draining}, {"unix:/b", ecc}, {"unix:/c", Info("p3", "abc", "2.21.5")}};
  const ClusterFindings f = FindClusterProblems(nodes);
  EXPECT_FALSE(f.version_mismatch);
  EXPECT_THAT(f.unhealthy, ElementsAre("unix:/a", "unix:/b"));
  ASSERT_EQ(f.lines.size(), 2u);
  EXPECT_THAT(f.lines[0], HasSubstr("unhealthy node: unix:/a: the daemon says it is not healthy"));
  EXPECT_THAT(f.lines[1], HasSubstr("unhealthy node: unix:/b: GPU 1: 3 uncorrectable ECC"));
  const std::string text = FormatClusterNodes(nodes);
  EXPECT_THAT(Row(text, "healthy"), ElementsAre("no", "yes", "yes", "UNHEALTHY"));
  EXPECT_THAT(Row(text, "GPU health"), ElementsAre("ok", "GPU 1: ecc", "ok", "UNHEALTHY"));

  const nlohmann::json j = ClusterNodesJson(nodes);
  EXPECT_EQ(j["unhealthy_nodes"], nlohmann::json({"unix:/a", "unix:/b"}));
  EXPECT_EQ(j["nodes"][1]["health_problems"].size(), 1u);
  EXPECT_EQ(j["nodes"][2]["info"]["node_name"], "p3");
  EXPECT_FALSE(j["version_mismatch"].get<bool>());
}

TEST(ClusterNodeTest, ANodeThatDidNotAnswerIsAColumnAndAFindingNotAMismatch) {
  const std::vector<NodeAnswer> nodes = {
      {"unix:/a", Info("p1", "abc", "2.21.5")},
      {"10.0.0.9:7070", absl::PermissionDeniedError("not in the group")}};
  const ClusterFindings f = FindClusterProblems(nodes);
  EXPECT_FALSE(f.version_mismatch);
  EXPECT_THAT(f.unanswered, ElementsAre("10.0.0.9:7070"));
  EXPECT_THAT(f.lines,
              ElementsAre("no answer from 10.0.0.9:7070: PERMISSION_DENIED: not in the group"));
  const std::string text = FormatClusterNodes(nodes);
  EXPECT_THAT(Row(text, "answered"), ElementsAre("yes", "no: PERMISSION_DENIED"));
  EXPECT_THAT(Row(text, "overlapd"), ElementsAre("0.1.0 (abc)", "-"));
  EXPECT_THAT(text, Not(HasSubstr("MISMATCH")));
  const nlohmann::json j = ClusterNodesJson(nodes);
  EXPECT_FALSE(j["nodes"][1]["answered"].get<bool>());
  EXPECT_EQ(j["nodes"][1]["error"]["code"], "PERMISSION_DENIED");
  EXPECT_FALSE(j["nodes"][1]["error"]["unreachable"].get<bool>());
  EXPECT_EQ(j["unanswered_nodes"], nlohmann::json({"10.0.0.9:7070"}));
}

TEST(ClusterNodeTest, ConnectNodesRefusesARepeatedOrEmptyAddress) {
  auto node = [](const std::string& address, const ClientTls& tls = {}) {
    return ClusterNode{address, tls, tls.enabled()};
  };
  EXPECT_EQ(ConnectNodes({}).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::vector<NodeClient>> twice = ConnectNodes({node("unix:/a"), node("unix:/a")});
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(twice.status().message(), HasSubstr("unix:/a is given twice"));
  // TLS is for HOST:PORT: the address is named.
  ClientTls tls;
  tls.ca_file = "/nonexistent/ca.pem";
  absl::StatusOr<std::vector<NodeClient>> tls_unix = ConnectNodes({node("unix:/a", tls)});
  EXPECT_THAT(tls_unix.status().message(), HasSubstr("unix:/a: --tls-*"));
  absl::StatusOr<std::vector<NodeClient>> two = ConnectNodes({node("unix:/a"), node("unix:/b")});
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ((*two)[1].address, "unix:/b");
}

TEST(ClusterTopTest, EveryNodesGpusUnderANodeColumnAndARowForOneThatDidNotAnswer) {
  NodeTopSample a{"unix:/a", absl::OkStatus(), Info("p1", "abc", "2.21.5"), {}};
  NodeTopSample b{"10.0.0.2:7070", absl::UnavailableError("connection refused"), {}, {}};
  const std::vector<NodeTopSample> nodes = {a, b};
  EXPECT_EQ(ClusterTopNodeWidth(nodes), 13u);
  const std::vector<std::string> lines =
      Lines(ClusterTopHeader(ClusterTopNodeWidth(nodes)) + FormatClusterTopSample(nodes, kNowMs));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].rfind("TIME                 NODE           GPU SM_MHZ", 0), 0u) << lines[0];
  // The GPUs' lines keep the header's width.
  EXPECT_EQ(lines[1].size(), lines[0].size());
  const std::vector<std::string> gpu1 = absl::StrSplit(lines[2], ' ', absl::SkipEmpty());
  ASSERT_GE(gpu1.size(), 3u);
  EXPECT_EQ(gpu1[0], "2026-12-01T02:58:53Z");
  EXPECT_EQ(gpu1[1], "unix:/a");
  EXPECT_EQ(gpu1[2], "1");
  EXPECT_EQ(lines[3],
            "2026-12-01T02:58:53Z 10.0.0.2:7070    - no answer: UNAVAILABLE: connection refused");

  const nlohmann::json j = ClusterTopSampleJson(nodes, kNowMs);
  EXPECT_EQ(j["time_ms"], kNowMs);
  ASSERT_EQ(j["nodes"].size(), 2u);
  EXPECT_EQ(j["nodes"][0]["address"], "unix:/a");
  EXPECT_EQ(j["nodes"][0]["devices"].size(), 2u);
  EXPECT_EQ(j["nodes"][1]["error"]["code"], "UNAVAILABLE");
  EXPECT_FALSE(j["nodes"][1].contains("devices"));
}

TEST(ClusterTopTest, ALongAddressKeepsItsEnd) {
  const std::string long_address = "unix:/" + std::string(60, 'x') + "/node-7.sock";
  NodeTopSample a{long_address, absl::OkStatus(), Info("p1", "abc", "2.21.5"), {}};
  const size_t width = ClusterTopNodeWidth({a});
  EXPECT_EQ(width, 40u);
  const std::vector<std::string> gpu0 =
      absl::StrSplit(Lines(FormatClusterTopSample({a}, kNowMs))[0], ' ', absl::SkipEmpty());
  ASSERT_GE(gpu0.size(), 2u);
  EXPECT_EQ(gpu0[1].size(), 40u);
  EXPECT_EQ(gpu0[1].rfind("~", 0), 0u);
  EXPECT_THAT(gpu0[1], ::testing::EndsWith("/node-7.sock"));
}

}  // namespace
}  // namespace overlap::client
