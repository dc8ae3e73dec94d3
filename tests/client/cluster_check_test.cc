// `overlapctl check --nodes`: the pair job's spec, and which node, GPU or link
// it calls slow from given numbers (and that the host backend's are not judged).
#include "client/measure/cluster_check.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "client/measure/check.h"
#include "common/graph_parser.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Pair;

// The fields of the line of `text` whose first field is `first`, split as awk
// splits them.
std::vector<std::string> AwkFields(const std::string& text, const std::string& first) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (!fields.empty() && fields[0] == first) return fields;
  }
  return {};
}

NodeCheck Node(const std::string& address, std::vector<double> gemm_ms) {
  NodeCheck n{address, address + "-peer", {}, {}};
  for (size_t i = 0; i < gemm_ms.size(); ++i) {
    n.gpus.push_back(GpuCheck{static_cast<int>(i), gemm_ms[i], 100});
  }
  return n;
}

NodePairCheck PairOf(size_t a, size_t b, double busbw) {
  NodePairCheck p;
  p.a = a;
  p.b = b;
  p.job = "job-1";
  p.ms = 1;
  p.busbw_gbps = busbw;
  p.verified = true;
  p.max_rel_error = 1e-3;
  p.tolerance = 1e-2;
  return p;
}

// `count` nodes of two GPUs at 1 ms each, every pair at 100 GB/s.
ClusterCheckResult Healthy(size_t count) {
  ClusterCheckResult r;
  r.pair_devices = 2;
  for (size_t i = 0; i < count; ++i) r.nodes.push_back(Node("n" + std::to_string(i), {1, 1}));
  for (size_t a = 0; a < count; ++a) {
    for (size_t b = a + 1; b < count; ++b) r.pairs.push_back(PairOf(a, b, 100));
  }
  return r;
}

TEST(ClusterCheckSpecTest, PairJobIsADpAllReduceOfTheAskedSizeOverATpByTwoMesh) {
  CheckOptions o;
  o.link_mib = 64;
  o.iterations = 7;
  auto spec = ParseJobSpec(PairCheckSpec({0, 1, 2, 3}, o));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->devices, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(spec->mesh.tp, 4);
  EXPECT_EQ(spec->mesh.dp, 2);
  EXPECT_TRUE(spec->verify);
  EXPECT_EQ(spec->iterations, 7);
  ASSERT_EQ(spec->ops.size(), 1u);
  const OpSpec& op = spec->ops[0];
  EXPECT_EQ(op.type, OpType::kAllReduce);
  EXPECT_EQ(op.group, OpGroup::kDp);
  EXPECT_EQ(op.transport, Transport::kNccl);      // p2p cannot cross daemons
  EXPECT_EQ(op.m * op.n * 2, int64_t{64} << 20);  // bf16, per rank
}

TEST(ClusterCheckTest, HealthyNodesAreClean) {
  const ClusterVerdict v = JudgeCluster(Healthy(4));
  EXPECT_TRUE(v.Clean());
  EXPECT_DOUBLE_EQ(v.link_reference_gbps, 100);
}

// One bad NIC slows every pair it is in: with three nodes that is 2 of 3
// pairs, so the median pair would be a slow one. The node is named, not its links.
TEST(ClusterCheckTest, ANodeAllOfWhosePairsAreSlowIsNamedInsteadOfItsLinks) {
  ClusterCheckResult r = Healthy(3);  // pairs 0-1, 0-2, 1-2
  r.pairs[1].busbw_gbps = 50;
  r.pairs[2].busbw_gbps = 52;
  const ClusterVerdict v = JudgeCluster(r);
  EXPECT_DOUBLE_EQ(v.link_reference_gbps, 100);  // median of bests 100, 100, 52
  EXPECT_THAT(v.slow_link_nodes, ElementsAre(2u));
  EXPECT_THAT(v.slow_pairs, IsEmpty());
  EXPECT_FALSE(v.Clean());
  const std::string text = FormatClusterCheck(r, CheckOptions{});
  EXPECT_THAT(text, HasSubstr("slow node link: n2, every pair with it more than 20% below the "
                              "reference 100.0 GB/s"));
  EXPECT_THAT(text, Not(HasSubstr("slow link:")));
  const nlohmann::json j = ClusterCheckJson(r, CheckOptions{});
  EXPECT_EQ(j["slow_link_nodes"], nlohmann::json({"n2"}));
  EXPECT_EQ(j["slow_links"], nlohmann::json::array());
}

TEST(ClusterCheckTest, OneSlowLinkAmongGoodOnesIsTheLink) {
  ClusterCheckResult r = Healthy(4);  // 0-1, 0-2, 0-3, 1-2, 1-3, 2-3
  r.pairs[0].busbw_gbps = 79;         // 0-1: 21% below
  r.pairs[5].busbw_gbps = 81;         // 2-3: 19% below, within the margin
  const ClusterVerdict v = JudgeCluster(r);
  EXPECT_THAT(v.slow_pairs, ElementsAre(0u));
  EXPECT_THAT(v.slow_link_nodes, IsEmpty());
  EXPECT_THAT(FormatClusterCheck(r, CheckOptions{}),
              HasSubstr("slow link: n0 - n1, 79.0 GB/s, more than 20% below the reference "
                        "100.0 GB/s"));
  EXPECT_EQ(ClusterCheckJson(r, CheckOptions{})["slow_links"],
            nlohmann::json::array({{"n0", "n1"}}));
}

TEST(ClusterCheckTest, TwoNodesHaveOneLinkAndNothingToCompareItWith) {
  ClusterCheckResult r = Healthy(2);
  r.pairs[0].busbw_gbps = 3;
  const ClusterVerdict v = JudgeCluster(r);
  EXPECT_TRUE(v.Clean());
  EXPECT_THAT(FormatClusterCheck(r, CheckOptions{}), HasSubstr("one link ran"));
}

TEST(ClusterCheckTest, ASlowNodeByItsMedianGemmAndASlowGpuElsewhere) {
  ClusterCheckResult r = Healthy(3);
  r.nodes[1].gpus = Node("n1", {1.10, 1.10}).gpus;  // the whole node 10% slower
  r.nodes[2].gpus[1].gemm_ms = 1.08;  // one GPU of node 2 8% slower: its node's median 4%
  const ClusterVerdict v = JudgeCluster(r);
  EXPECT_THAT(v.slow_nodes, ElementsAre(1u));
  // Node 1's GPUs are its node's finding, not each their own.
  EXPECT_THAT(v.slow_gpus, ElementsAre(Pair(2u, 1u)));
  const std::string text = FormatClusterCheck(r, CheckOptions{});
  EXPECT_THAT(text, HasSubstr("slow node: n1, its GPUs' median GEMM 10.0% slower than the "
                              "fastest node's (n0; more than 5%)"));
  EXPECT_THAT(text, HasSubstr("slow GPU: n2 GPU 1, its GEMM 8.0% slower"));
  const nlohmann::json j = ClusterCheckJson(r, CheckOptions{});
  EXPECT_EQ(j["slow_nodes"], nlohmann::json({"n1"}));
  EXPECT_EQ(j["slow_gpus"], nlohmann::json::array({{{"node", "n2"}, {"device", 1}}}));
  EXPECT_DOUBLE_EQ(j["nodes"][1]["median_gemm_ms"].get<double>(), 1.10);
}

// The host backend's timings are CPU threads': the same numbers call nothing
// slow, but a failed pair and an unhealthy node still count.
TEST(ClusterCheckTest, OnTheHostBackendNothingIsSlowButFailuresAndHealthCount) {
  ClusterCheckResult r = Healthy(3);
  r.timings_judged = false;
  r.nodes[1].gpus = Node("n1", {2, 2}).gpus;
  r.pairs[1].busbw_gbps = 10;
  r.pairs[2].busbw_gbps = 10;
  EXPECT_TRUE(JudgeCluster(r).Clean());
  const std::string text = FormatClusterCheck(r, CheckOptions{});
  EXPECT_EQ(text.rfind("host backend: these timings", 0), 0u) << text;
  EXPECT_THAT(text, Not(HasSubstr("SLOW")));
  EXPECT_THAT(text, Not(HasSubstr("no slow node")));

  r.pairs[2].failed = "job-000009  FAILED  check-nodes  error: op link: verification failed";
  r.nodes[0].problems.push_back("the daemon says it is not healthy (draining)");
  const ClusterVerdict v = JudgeCluster(r);
  EXPECT_THAT(v.failed_pairs, ElementsAre(2u));
  EXPECT_THAT(v.unhealthy_nodes, ElementsAre(0u));
  EXPECT_FALSE(v.Clean());
  const std::string failed = FormatClusterCheck(r, CheckOptions{});
  EXPECT_THAT(failed, HasSubstr("link failed: n1 - n2: job-000009  FAILED"));
  EXPECT_THAT(failed, HasSubstr("unhealthy node: n0, the daemon says"));
}

TEST(ClusterCheckTest, APairThatCouldNotRunIsSaidAndNotJudged) {
  ClusterCheckResult r = Healthy(3);
  r.pairs[0].not_checked = "n0 has no peer listener (config peer_listen)";
  r.pairs[0].busbw_gbps = 0;
  const ClusterVerdict v = JudgeCluster(r);
  EXPECT_TRUE(v.Clean());
  const std::string text = FormatClusterCheck(r, CheckOptions{});
  EXPECT_THAT(text, HasSubstr("not checked: n0 - n1: n0 has no peer listener"));
  const nlohmann::json j = ClusterCheckJson(r, CheckOptions{});
  EXPECT_EQ(j["pairs"][0]["not_checked"], "n0 has no peer listener (config peer_listen)");
  EXPECT_FALSE(j["pairs"][0].contains("busbw_gbps"));
}

// The links table: one word a cell, the error in MAX_REL_ERR and VERIFY ok,
// failed, off (the daemon checked nothing) or "-" (no job ran).
TEST(ClusterCheckTest, LinkRowsCarryTheErrorAndAOneWordVerify) {
  ClusterCheckResult r = Healthy(3);  // pairs n0-n1, n0-n2, n1-n2
  r.pairs[1].max_rel_error = 0.25;
  r.pairs[2].not_checked = "n1 has no peer listener (config peer_listen)";
  const std::string text = FormatClusterCheck(r, CheckOptions{});
  EXPECT_THAT(AwkFields(text, "PAIR"), ElementsAre("PAIR", "JOB", "MS", "BUSBW_GBPS",
                                                   "VS_REFERENCE", "MAX_REL_ERR", "VERIFY"));
  EXPECT_THAT(AwkFields(text, "n0,n1"),
              ElementsAre("n0,n1", "job-1", "1.000", "100.0", "+0.0%", "1.0e-03", "ok"));
  EXPECT_THAT(AwkFields(text, "n0,n2"),
              ElementsAre("n0,n2", "job-1", "1.000", "100.0", "+0.0%", "2.5e-01", "failed"));
  EXPECT_THAT(AwkFields(text, "n1,n2"),
              ElementsAre("n1,n2", "job-1", "-", "-", "-", "-", "-", "NOT_CHECKED"));
  r.pairs[0].verified = false;
  EXPECT_THAT(AwkFields(FormatClusterCheck(r, CheckOptions{}), "n0,n1"),
              ElementsAre("n0,n1", "job-1", "1.000", "100.0", "+0.0%", "-", "off"));
  const nlohmann::json j = ClusterCheckJson(r, CheckOptions{});
  EXPECT_EQ(j["pairs"][0]["verified"], false);
  EXPECT_EQ(j["pairs"][1]["verified"], true);
  EXPECT_DOUBLE_EQ(j["pairs"][1]["max_rel_error"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j["pairs"][1]["tolerance"].get<double>(), 1e-2);
}

TEST(ClusterCheckTest, MedianGemmOfANode) {
  EXPECT_DOUBLE_EQ(MedianGemmMs(Node("a", {3, 1, 2})), 2);
  EXPECT_DOUBLE_EQ(MedianGemmMs(Node("a", {4, 1, 2, 3})), 2.5);
  EXPECT_DOUBLE_EQ(MedianGemmMs(Node("a", {})), 0);
}

}  // namespace
}  // namespace overlap::client
