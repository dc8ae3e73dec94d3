// commbench --peers and bench --peers end to end over two real daemons on
// loopback (host backend, two devices each, peers of each other): every row
// verified, the note that host figures mean nothing, and a daemon without a
// peer listener refusing with FAILED_PRECONDITION. Tiny sizes and few
// iterations; the daemons are started once for the suite.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/harness.h"

namespace overlap::testing {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kHostNote[] = "host backend: the figures mean nothing";

struct Cluster {
  std::vector<std::unique_ptr<TempDir>> dirs;
  std::vector<std::string> peers;  // 127.0.0.1:PORT
  std::vector<std::unique_ptr<Daemon>> daemons;
  std::string nodes;  // "A,B"
  std::string failure;
};

class ClusterBenchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new Cluster;
    for (int port : FreeLoopbackPorts(2)) {
      cluster_->dirs.push_back(std::make_unique<TempDir>());
      cluster_->peers.push_back(absl::StrCat("127.0.0.1:", port));
    }
    cluster_->nodes = absl::StrCat(cluster_->peers[0], ",", cluster_->peers[1]);
    const std::string key = WriteClusterKey(cluster_->dirs[0]->File("cluster.key"));
    const TestNodeKeys node_keys = MakeTestNodeKeys(cluster_->dirs[0]->path(), cluster_->peers);
    if (!node_keys.error.empty()) {
      cluster_->failure = node_keys.error;
      return;
    }
    for (int i = 0; i < 2; ++i) {
      const std::string config = cluster_->dirs[i]->File("overlapd.yaml");
      WriteFileOrDie(
          config, absl::StrCat("peer_listen: \"", cluster_->peers[i], "\"\n", "peer_key_file: \"",
                               key, "\"\n", node_keys.ConfigFor(i), "peers: [\"",
                               cluster_->peers[1 - i], "\"]\n", "cluster_hold_timeout_ms: 3000\n",
                               "cluster_collective_timeout_ms: 4000\n"));
      cluster_->daemons.push_back(std::make_unique<Daemon>(
          cluster_->dirs[i]->path(),
          std::vector<std::string>{"--config", config, "--host-devices", "2"}));
      if (::testing::AssertionResult started = cluster_->daemons[i]->Start(); !started) {
        cluster_->failure = absl::StrCat(started.message(), cluster_->daemons[i]->Log());
        return;
      }
    }
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(cluster_->failure.empty()) << cluster_->failure; }
  void TearDown() override {
    if (!HasFailure()) return;
    for (const auto& d : cluster_->daemons) std::cerr << "overlapd log:\n" << d->Log();
  }

  Daemon& coordinator() { return *cluster_->daemons[0]; }
  const std::string& nodes() { return cluster_->nodes; }
  std::string File(const std::string& name) { return cluster_->dirs[0]->File(name); }

  static Cluster* cluster_;
};

Cluster* ClusterBenchTest::cluster_ = nullptr;

TEST_F(ClusterBenchTest, CommbenchTimesDpFlatAndHierarchicalAllReducesAcrossTheDaemons) {
  const std::string json = File("commbench.json");
  RunResult run =
      coordinator().Ctl({"commbench", "--peers", nodes(), "--min-bytes", "16KiB", "--max-bytes",
                         "64KiB", "--iterations", "3", "--warmup", "1", "--json-out", json});
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  EXPECT_THAT(run.out, HasSubstr("commbench: all_reduce across 2 nodes x 2 device(s) (mesh tp 2 "
                                 "x dp 2), bf16; busbw = algbw x 2(N-1)/N, N = 2 (dp) or 4 "
                                 "(world)"));
  // Two sizes, each with its three columns filled and checked against float64:
  // the worst error, then VERIFY.
  EXPECT_THAT(run.out,
              ContainsRegex("\n *16KiB +8192( +[0-9.]+){9} +[0-9.]+x +[0-9.]+e[-+][0-9]+ +ok\n"));
  EXPECT_THAT(run.out,
              ContainsRegex("\n *64KiB +32768( +[0-9.]+){9} +[0-9.]+x +[0-9.]+e[-+][0-9]+ +ok\n"));
  EXPECT_THAT(run.out, Not(HasSubstr(" failed\n")));
  EXPECT_THAT(run.out, HasSubstr(kHostNote));
  EXPECT_THAT(run.out, HasSubstr(absl::StrCat("nodes: 0 ", cluster_->peers[0], " ranks 0-1")));
  EXPECT_THAT(run.err, HasSubstr("on 2 nodes x 2 host device(s)"));

  const nlohmann::json j = ParseJson(ReadFileOrEmpty(json));
  EXPECT_EQ(j["figures_meaningful"], false);
  EXPECT_EQ(j["mesh"]["tp"], 2);
  EXPECT_EQ(j["mesh"]["dp"], 2);
  ASSERT_EQ(j["rows"].size(), 2u) << j.dump(1);
  for (const nlohmann::json& row : j["rows"]) {
    ASSERT_EQ(row["variants"].size(), 3u) << row.dump(1);
    for (const auto& [variant, v] : row["variants"].items()) {
      EXPECT_TRUE(v["verified"].get<bool>()) << variant;
      EXPECT_LT(v["max_rel_error"].get<double>(), 1.6e-2) << variant;  // bf16 at 4 ranks
      EXPECT_GT(v["busbw_gbps"].get<double>(), 0) << variant;
    }
  }
}

TEST_F(ClusterBenchTest, BenchRunsTheGradientsWholeBucketedChunkedAndDynamicBesideGemms) {
  const std::string json = File("bench.json");
  RunResult run =
      coordinator().Ctl({"bench", "--peers", nodes(), "--grad-sizes", "16KiB,128KiB", "--gemm",
                         "64x64x64", "--gemms-per-grad", "2", "--chunk-kib", "32", "--iterations",
                         "3", "--warmup", "1", "--json-out", json});
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  EXPECT_THAT(run.out, HasSubstr("2 gradient(s) a rank (16KiB, 128KiB: 144KiB)"));
  EXPECT_THAT(run.out, ContainsRegex("\nwhole +2 whole( +[0-9.]+){7} +[0-9.]+e[-+][0-9]+ +ok\n"));
  EXPECT_THAT(run.out,
              ContainsRegex(
                  "\nbucketed 25MiB +1 bucket of 144KiB( +[0-9.]+){7} +[0-9.]+e[-+][0-9]+ +ok\n"));
  EXPECT_THAT(
      run.out,
      ContainsRegex(
          "\nchunked 32KiB +4 pieces of 32KiB, 1 whole( +[0-9.]+){7} +[0-9.]+e[-+][0-9]+ +ok\n"));
  // The same pieces, dispatched at run time on the deferred lane.
  EXPECT_THAT(
      run.out,
      ContainsRegex(
          "\ndynamic 32KiB +4 pieces of 32KiB, 1 whole( +[0-9.]+){7} +[0-9.]+e[-+][0-9]+ +ok\n"));
  EXPECT_THAT(run.out, HasSubstr(kHostNote));

  const nlohmann::json j = ParseJson(ReadFileOrEmpty(json));
  EXPECT_EQ(j["figures_meaningful"], false);
  ASSERT_EQ(j["forms"].size(), 4u) << j.dump(1);
  for (const nlohmann::json& form : j["forms"]) {
    EXPECT_TRUE(form["verified"].get<bool>()) << form.dump(1);
    EXPECT_TRUE(form["within_tolerance"].get<bool>()) << form.dump(1);
    EXPECT_GT(form["layer_step_ms"].get<double>(), 0) << form.dump(1);
    EXPECT_GT(form["busbw_gbps"].get<double>(), 0) << form.dump(1);
  }
  EXPECT_EQ(j["forms"][2]["messages"][1]["how"], "chunked");
  EXPECT_EQ(j["forms"][2]["messages"][1]["pieces"], 4);
  EXPECT_EQ(j["forms"][3]["scheduler"], "dynamic");
  EXPECT_EQ(j["forms"][3]["messages"][1]["pieces"], 4);
}

TEST_F(ClusterBenchTest, ADaemonWithoutAPeerListenerRefusesAndSweepFlagsAreUsageErrors) {
  TempDir dir;
  Daemon lone(dir.path(), {"--host-devices", "2"});
  ASSERT_TRUE(lone.Start()) << lone.Log();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"commbench", "--peers", nodes(), "--iterations", "1"},
        std::vector<std::string>{"bench", "--peers", nodes(), "--iterations", "1"}}) {
    RunResult refused = lone.Ctl(args);
    EXPECT_EQ(refused.exit_code, 3) << Describe(refused);
    EXPECT_THAT(refused.err, HasSubstr("FAILED_PRECONDITION"));
    EXPECT_THAT(refused.err, HasSubstr("peer_listen"));
  }
  RunResult sweep =
      coordinator().Ctl({"bench", "--peers", nodes(), "--shapes", "ag_gemm:64x64x64"});
  EXPECT_EQ(sweep.exit_code, 64) << Describe(sweep);
  RunResult one = coordinator().Ctl({"commbench", "--peers", cluster_->peers[0]});
  EXPECT_EQ(one.exit_code, 64) << Describe(one);
  EXPECT_THAT(one.err, HasSubstr("--peers: give at least two daemons"));
}

}  // namespace
}  // namespace overlap::testing
