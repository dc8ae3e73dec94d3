// TLS on overlapd's TCP port, through the real binaries: mutual TLS lets in
// only clients with a certificate from the configured CA, server-only TLS
// checks the daemon's name, and TLS settings that cannot work stop the daemon
// at start with the reason. Certificates are made with the openssl CLI.
#include <cstdlib>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"
#include "tests/openssl_util.h"

namespace overlap::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr int kCtlUnreachable = 2;  // client/core/command_io.h
constexpr int kDaemonUsage = 2;     // overlapd: a config error

// A CA, a server certificate for localhost and 127.0.0.1 and a client
// certificate signed by it, and a second CA with its own client certificate
// that the daemon must refuse.
class Pki {
 public:
  explicit Pki(const std::string& dir) : dir_(dir) {
    ok_ = Run("printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > server.ext") &&
          Run("printf 'extendedKeyUsage=clientAuth\\n' > client.ext") && MakeCa("ca") &&
          MakeCa("rogue-ca") && MakeLeaf("server", "ca", "server.ext") &&
          MakeLeaf("client", "ca", "client.ext") &&
          MakeLeaf("rogue-client", "rogue-ca", "client.ext") &&
          Run("printf 'not a key\\n' > garbage.pem");
  }
  bool ok() const { return ok_; }
  std::string File(const std::string& name) const { return dir_ + "/" + name; }

 private:
  bool Run(const std::string& command) const { return RunInDir(dir_, command); }
  bool MakeCa(const std::string& name) const { return MakeTestCa(dir_, name); }
  bool MakeLeaf(const std::string& name, const std::string& ca, const std::string& ext) const {
    return MakeTestLeaf(dir_, name, ca, ext, "/CN=" + name);
  }

  std::string dir_;
  bool ok_ = false;
};

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "the openssl CLI is not installed (scripts/install-deps.sh installs it)";
    }
    pki_ = std::make_unique<Pki>(dir_.path());
    ASSERT_TRUE(pki_->ok()) << "openssl could not make the test certificates in " << dir_.path();
    small_graph_ = dir_.File("small.yaml");
    WriteFileOrDie(small_graph_, kSmallGraph);
    address_ = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  }
  void TearDown() override {
    if (HasFailure() && daemon_) std::cerr << "overlapd log:\n" << daemon_->Log();
  }

  std::vector<std::string> ServerTls(bool mutual) const {
    std::vector<std::string> flags = {"--tls-cert", pki_->File("server.pem"), "--tls-key",
                                      pki_->File("server.key")};
    if (mutual) {
      flags.push_back("--tls-client-ca");
      flags.push_back(pki_->File("ca.pem"));
    }
    return flags;
  }

  void StartDaemon(std::vector<std::string> flags, std::vector<std::string> ctl_flags) {
    daemon_ = std::make_unique<Daemon>(dir_.path(), std::move(flags));
    daemon_->set_address(address_);
    daemon_->set_ctl_flags(std::move(ctl_flags));
    ASSERT_TRUE(daemon_->Start()) << Describe(daemon_->Ctl({"node"}));
  }

  RunResult CtlWith(const std::vector<std::string>& flags) const {
    std::vector<std::string> args = flags;
    args.push_back("node");
    return Overlapctl(dir_.path(), address_, args, std::chrono::seconds(30));
  }

  // overlapd with `flags` must refuse to start (exit 2) saying `reason`.
  void ExpectRefusedAtStart(std::vector<std::string> flags, const std::string& reason) {
    std::vector<std::string> argv = {OVERLAPD_BIN, "--backend", "host", "--state-dir",
                                     dir_.File("state")};
    argv.insert(argv.end(), flags.begin(), flags.end());
    RunResult r = Child::Spawn(argv, dir_.path())->Wait(std::chrono::seconds(20));
    EXPECT_EQ(r.exit_code, kDaemonUsage) << Describe(r);
    EXPECT_THAT(r.err + r.out, HasSubstr(reason));
  }

  TempDir dir_;
  std::unique_ptr<Pki> pki_;
  std::unique_ptr<Daemon> daemon_;
  std::string small_graph_;
  std::string address_;
};

TEST_F(TlsTest, MutualTlsLetsInOnlyClientsWithACertificateFromTheCa) {
  const std::vector<std::string> good = {"--tls-ca",   pki_->File("ca.pem"),
                                         "--tls-cert", pki_->File("client.pem"),
                                         "--tls-key",  pki_->File("client.key")};
  StartDaemon(ServerTls(/*mutual=*/true), good);
  EXPECT_THAT(daemon_->Log(), HasSubstr("(TLS, client certificates required)"));
  RunResult done = daemon_->Ctl({"submit", small_graph_, "--wait", "--json"});
  ASSERT_EQ(done.exit_code, 0) << Describe(done);
  EXPECT_EQ(ParseJson(done.out)["state"], "SUCCEEDED");
  // The certificate names the owner; a certificate never makes an admin.
  EXPECT_EQ(ParseJson(done.out)["owner"], "x509:CN=client");
  RunResult forget = daemon_->Ctl({"tuning", "forget", "--all"});
  EXPECT_EQ(forget.exit_code, 3) << Describe(forget);
  EXPECT_THAT(forget.err, HasSubstr("PERMISSION_DENIED"));

  const std::vector<std::vector<std::string>> refused = {
      {},                                  // plaintext
      {"--tls-ca", pki_->File("ca.pem")},  // no client certificate
      {"--tls-ca", pki_->File("ca.pem"), "--tls-cert", pki_->File("rogue-client.pem"), "--tls-key",
       pki_->File("rogue-client.key")},  // signed by another CA
      {"--tls-ca", pki_->File("rogue-ca.pem"), "--tls-cert", pki_->File("client.pem"), "--tls-key",
       pki_->File("client.key")},  // the daemon's certificate is not trusted
  };
  for (const std::vector<std::string>& flags : refused) {
    SCOPED_TRACE(::testing::PrintToString(flags));
    RunResult r = CtlWith(flags);
    EXPECT_EQ(r.exit_code, kCtlUnreachable) << Describe(r);
    EXPECT_THAT(r.err, StartsWith("overlapctl: cannot reach overlapd at " + address_));
    EXPECT_THAT(r.err, HasSubstr("if overlapd uses TLS, pass --tls-ca"));
  }
  // The same files through the environment work as the flags do.
  RunResult by_env = Overlapctl(
      dir_.path(), address_, {"node"}, std::chrono::seconds(30),
      {"OVERLAPD_TLS_CA=" + pki_->File("ca.pem"), "OVERLAPD_TLS_CERT=" + pki_->File("client.pem"),
       "OVERLAPD_TLS_KEY=" + pki_->File("client.key")});
  EXPECT_EQ(by_env.exit_code, 0) << Describe(by_env);
  EXPECT_TRUE(daemon_->running()) << "refused handshakes must not hurt the daemon";
}

TEST_F(TlsTest, ServerOnlyTlsChecksTheDaemonsName) {
  StartDaemon(ServerTls(/*mutual=*/false), {"--tls-ca", pki_->File("ca.pem")});
  EXPECT_EQ(CtlWith({"--tls-ca", pki_->File("ca.pem")}).exit_code, 0);
  RunResult named = CtlWith({"--tls-ca", pki_->File("ca.pem"), "--tls-server-name", "localhost"});
  EXPECT_EQ(named.exit_code, 0) << Describe(named);
  RunResult wrong_name =
      CtlWith({"--tls-ca", pki_->File("ca.pem"), "--tls-server-name", "gpu-node-17"});
  EXPECT_EQ(wrong_name.exit_code, kCtlUnreachable) << Describe(wrong_name);
  RunResult plaintext = CtlWith({});
  EXPECT_EQ(plaintext.exit_code, kCtlUnreachable) << Describe(plaintext);
}

TEST_F(TlsTest, ClientRefusesTlsFilesItCannotUse) {
  struct Case {
    std::vector<std::string> flags;
    std::string address, message;
  };
  const std::vector<Case> cases = {
      {{"--tls-ca", dir_.File("missing.pem")}, address_, "--tls-ca: cannot read "},
      {{"--tls-ca", pki_->File("garbage.pem")}, address_, "holds no PEM CERTIFICATE"},
      {{"--tls-cert", pki_->File("client.pem")}, address_, "--tls-cert and --tls-key go together"},
      {{"--tls-ca", pki_->File("ca.pem"), "--tls-cert", pki_->File("client.pem"), "--tls-key",
        pki_->File("client.pem")},
       address_,
       "--tls-key: " + pki_->File("client.pem") + " holds no PEM PRIVATE KEY"},
      {{"--tls-ca", pki_->File("ca.pem")}, "unix:" + dir_.File("s.sock"), "not unix:"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    std::vector<std::string> args = c.flags;
    args.push_back("node");
    RunResult r = Overlapctl(dir_.path(), c.address, args, std::chrono::seconds(30));
    EXPECT_EQ(r.exit_code, 64) << Describe(r);  // kExitUsage
    EXPECT_THAT(r.err, StartsWith("overlapctl: "));
    EXPECT_THAT(r.err, HasSubstr(c.message));
  }
}

TEST_F(TlsTest, DaemonRefusesTlsSettingsThatCannotWork) {
  ExpectRefusedAtStart({"--listen", address_, "--tls-cert", pki_->File("server.pem")},
                       "tls_cert and tls_key go together (got only tls_cert)");
  ExpectRefusedAtStart({"--listen", address_, "--tls-client-ca", pki_->File("ca.pem")},
                       "tls_client_ca needs tls_cert and tls_key");
  ExpectRefusedAtStart({"--listen", address_, "--tls-cert", dir_.File("missing.pem"), "--tls-key",
                        pki_->File("server.key")},
                       "tls_cert: cannot read " + dir_.File("missing.pem"));
  ExpectRefusedAtStart({"--listen", address_, "--tls-cert", pki_->File("server.pem"), "--tls-key",
                        pki_->File("garbage.pem")},
                       "tls_key: " + pki_->File("garbage.pem") + " holds no PEM PRIVATE KEY");
  ExpectRefusedAtStart({"--listen", "unix:" + dir_.File("d.sock"), "--tls-cert",
                        pki_->File("server.pem"), "--tls-key", pki_->File("server.key")},
                       "TLS is for HOST:PORT listen addresses");
  // TLS alone does not authenticate anyone: the network still needs the opt-in.
  const std::string any_host = "0.0.0.0:" + std::to_string(FreeLoopbackPort());
  ExpectRefusedAtStart({"--listen", any_host, "--tls-cert", pki_->File("server.pem"), "--tls-key",
                        pki_->File("server.key")},
                       "clients are not authenticated");
}

// With client certificates required, the daemon may listen beyond loopback
// without allow_insecure_tcp, and says nothing about being insecure.
TEST_F(TlsTest, MutualTlsMayFaceTheNetwork) {
  address_ = "0.0.0.0:" + std::to_string(FreeLoopbackPort());
  StartDaemon(ServerTls(/*mutual=*/true),
              {"--tls-ca", pki_->File("ca.pem"), "--tls-cert", pki_->File("client.pem"),
               "--tls-key", pki_->File("client.key"), "--tls-server-name", "localhost"});
  EXPECT_THAT(daemon_->Log(), Not(HasSubstr("anyone who can reach this port")));
}

}  // namespace
}  // namespace overlap::testing
