// One meaning per flag: --peers (the daemons' peer addresses, for a job that
// spans them) and --nodes (their user addresses, for the views) are refused
// where they mean the other, naming the flag to use; plan counts nodes with
// --node-count. And the cluster view reaches each daemon its own way: a TLS
// daemon on TCP and a unix-socket one side by side, from a cluster file or
// from --nodes with the --tls-* flags (which a unix socket does not take).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/harness.h"
#include "tests/openssl_util.h"

namespace overlap::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kUsage = 64;

TEST(PeersAndNodesTest, EachFlagIsRefusedWhereItMeansTheOtherNamingTheRightOne) {
  TempDir dir;
  const std::string address = "unix:" + dir.File("nobody.sock");
  const std::string graph = dir.File("g.yaml");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::string peers = "takes the daemons' peer addresses as --peers";
  const std::string nodes = "takes the daemons' user addresses as --nodes";
  const std::vector<Case> cases = {
      {{"submit", graph, "--nodes", "a:7000,b:7000"}, "--nodes: submit " + peers},
      {{"submit", "--nodes", "a:7000", graph, "--wait"}, "--nodes: submit " + peers},
      {{"validate", graph, "--nodes", "a:7000,b:7000"}, "--nodes: validate " + peers},
      {{"bench", "--nodes", "a:7000,b:7000"}, "--nodes: bench " + peers},
      {{"commbench", "--nodes=a:7000,b:7000"}, "--nodes: commbench " + peers},
      {{"node", "--peers", "a:7000,b:7000"}, "--peers: node " + nodes},
      {{"top", "--peers", "a:7000"}, "--peers: top " + nodes},
      {{"check", "--peers", "a:7000"}, "--peers: check " + nodes},
      {{"plan", graph, "--nodes", "4"}, "--nodes: plan takes the number of nodes as --node-count"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.args));
    RunResult r = Overlapctl(dir.path(), address, c.args, std::chrono::seconds(20));
    EXPECT_EQ(r.exit_code, kUsage) << Describe(r);
    EXPECT_THAT(r.err, HasSubstr(c.message));
  }
  // The new names are taken: here they fail only for want of a daemon (exit 2).
  WriteFileOrDie(graph, kSmallGraph);
  RunResult submit = Overlapctl(dir.path(), address, {"submit", graph, "--peers", "a:1,b:1"});
  EXPECT_EQ(submit.exit_code, 2) << Describe(submit);
  RunResult node = Overlapctl(dir.path(), address, {"node", "--nodes", address});
  EXPECT_EQ(node.exit_code, 2) << Describe(node);
}

TEST(PeersAndNodesTest, ABadClusterFileIsAUsageErrorNamingTheNodeAndField) {
  TempDir dir;
  const std::string file = dir.File("cluster.yaml");
  WriteFileOrDie(file, "- address: unix:/tmp/a.sock\n- address: 127.0.0.1:1\n  tls-ca: ca.pem\n");
  RunResult r = Overlapctl(dir.path(), "", {"node", "--cluster-file", file});
  EXPECT_EQ(r.exit_code, kUsage) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr(file + ": nodes[1].tls-ca: unknown key"));
  RunResult missing = Overlapctl(dir.path(), "", {"top", "--cluster-file", dir.File("none.yaml")});
  EXPECT_EQ(missing.exit_code, kUsage) << Describe(missing);
  EXPECT_THAT(missing.err, HasSubstr("cannot read " + dir.File("none.yaml")));
}

// A daemon with mutual TLS on 127.0.0.1:PORT and one on a unix socket.
class MixedViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "the openssl CLI is not installed (scripts/install-deps.sh installs it)";
    }
    const std::string& d = tls_dir_.path();
    ASSERT_TRUE(RunInDir(d, "printf 'subjectAltName=IP:127.0.0.1\\n' > server.ext") &&
                RunInDir(d, "printf 'extendedKeyUsage=clientAuth\\n' > client.ext") &&
                MakeTestCa(d, "ca") && MakeTestLeaf(d, "server", "ca", "server.ext", "/CN=s") &&
                MakeTestLeaf(d, "client", "ca", "client.ext", "/CN=client"))
        << "openssl could not make the test certificates in " << d;
    tls_address_ = absl::StrCat("127.0.0.1:", FreeLoopbackPort());
    tls_daemon_ = std::make_unique<Daemon>(
        d, std::vector<std::string>{"--tls-cert", tls_dir_.File("server.pem"), "--tls-key",
                                    tls_dir_.File("server.key"), "--tls-client-ca",
                                    tls_dir_.File("ca.pem")});
    tls_daemon_->set_address(tls_address_);
    tls_daemon_->set_ctl_flags(ClientTlsFlags());
    ASSERT_TRUE(tls_daemon_->Start()) << tls_daemon_->Log();
    unix_daemon_ = std::make_unique<Daemon>(unix_dir_.path());
    ASSERT_TRUE(unix_daemon_->Start()) << unix_daemon_->Log();
  }
  void TearDown() override {
    if (!HasFailure()) return;
    for (Daemon* d : {tls_daemon_.get(), unix_daemon_.get()}) {
      if (d != nullptr) std::cerr << "overlapd log:\n" << d->Log();
    }
  }

  std::vector<std::string> ClientTlsFlags() const {
    return {"--tls-ca",  tls_dir_.File("ca.pem"),    "--tls-cert", tls_dir_.File("client.pem"),
            "--tls-key", tls_dir_.File("client.key")};
  }

  TempDir tls_dir_;
  TempDir unix_dir_;
  std::string tls_address_;
  std::unique_ptr<Daemon> tls_daemon_;
  std::unique_ptr<Daemon> unix_daemon_;
};

TEST_F(MixedViewTest, ATlsDaemonAndAUnixSocketOneAreViewedTogether) {
  // The file's TLS paths are relative to its own directory, not to the caller's.
  std::filesystem::create_directories(tls_dir_.File("view"));
  const std::string file = tls_dir_.File("view/cluster.yaml");
  WriteFileOrDie(file, absl::StrCat("- address: ", tls_address_,
                                    "\n  tls_ca: ../ca.pem\n  tls_cert: ../client.pem\n"
                                    "  tls_key: ../client.key\n- address: ",
                                    unix_daemon_->address(), "\n"));
  RunResult node = Overlapctl(unix_dir_.path(), "", {"node", "--cluster-file", file, "--json"});
  ASSERT_EQ(node.exit_code, 0) << Describe(node);
  const nlohmann::json j = ParseJson(node.out);
  ASSERT_EQ(j["nodes"].size(), 2u);
  EXPECT_EQ(j["nodes"][0]["address"], tls_address_);
  EXPECT_EQ(j["nodes"][1]["address"], unix_daemon_->address());
  for (const nlohmann::json& n : j["nodes"]) EXPECT_TRUE(n["answered"].get<bool>()) << n;

  // A file's node joined by --nodes; top samples both.
  WriteFileOrDie(file, absl::StrCat("- address: ", tls_address_, "\n  tls_ca: ../ca.pem\n",
                                    "  tls_cert: ../client.pem\n  tls_key: ../client.key\n"));
  RunResult top = Overlapctl(unix_dir_.path(), "",
                             {"top", "--cluster-file", file, "--nodes", unix_daemon_->address(),
                              "--count", "1", "--json"});
  ASSERT_EQ(top.exit_code, 0) << Describe(top);
  const nlohmann::json sample = ParseJson(top.out);
  ASSERT_EQ(sample["nodes"].size(), 2u);
  EXPECT_EQ(sample["nodes"][1]["devices"].size(), 4u);

  // Without a file: the --tls-* flags go to the HOST:PORT node only.
  std::vector<std::string> args = ClientTlsFlags();
  args.insert(args.end(), {"node", "--nodes", tls_address_ + "," + unix_daemon_->address()});
  RunResult flags = Overlapctl(unix_dir_.path(), tls_address_, args);
  EXPECT_EQ(flags.exit_code, 0) << Describe(flags);
  // Without TLS, the TLS daemon is a node that did not answer (exit 2); the other is shown.
  RunResult plain = Overlapctl(unix_dir_.path(), "",
                               {"node", "--nodes", tls_address_ + "," + unix_daemon_->address()});
  EXPECT_EQ(plain.exit_code, 2) << Describe(plain);
}

}  // namespace
}  // namespace overlap::testing
