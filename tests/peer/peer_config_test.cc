// The checks of the cluster keys that need address parsing or files
// (ValidatePeerConfig, ParsePeerAddress); the rest are in
// tests/common/config_test.cc.
#include "server/peer/peer_config.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/peer/certificate_names.h"
#include "server/peer/node_keys.h"
#include "tests/openssl_util.h"

namespace overlap::peer {
namespace {

using ::testing::HasSubstr;

// A known-nodes file (peer_known_nodes_file) listing `nodes`, each with a key of its own.
std::string KnownNodesFile(const std::vector<std::string>& nodes) {
  char pattern[] = "/tmp/ovl-known-XXXXXX";
  const std::string path = std::string(mkdtemp(pattern)) + "/known_nodes";
  std::ofstream out(path);
  for (const std::string& node : nodes) {
    out << node << " " << NodeKey::Generate()->public_text() << "\n";
  }
  out.close();
  ::chmod(path.c_str(), 0644);
  return path;
}

DaemonConfig Loopback() {
  DaemonConfig config;
  config.peer_listen = "127.0.0.1:7000";
  config.peers = {"127.0.0.1:7001", "localhost:7002", "[::1]:7003"};
  static const std::string known = KnownNodesFile(config.peers);
  config.peer_known_nodes_file = known;
  return config;
}

void ExpectInvalid(const DaemonConfig& config, const std::string& message) {
  const absl::Status status = ValidatePeerConfig(config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << message;
  EXPECT_THAT(std::string(status.message()), HasSubstr(message));
}

TEST(PeerConfigTest, NoPeerListenerNeedsNothing) {
  EXPECT_TRUE(ValidatePeerConfig(DaemonConfig()).ok());
  DaemonConfig config;
  config.peer_tls_cert = "/nonexistent.pem";  // unused without a listener
  EXPECT_TRUE(ValidatePeerConfig(config).ok());
}

TEST(PeerConfigTest, PeersWithoutTlsNeedTheirNodeKeysListed) {
  DaemonConfig config = Loopback();
  config.peer_known_nodes_file.clear();
  ExpectInvalid(config, "peer_known_nodes_file: needed when peers are listed without peer TLS");
  config.peers.clear();  // a daemon that coordinates with no one needs none
  EXPECT_TRUE(ValidatePeerConfig(config).ok()) << ValidatePeerConfig(config);
  config = Loopback();
  config.peer_known_nodes_file = KnownNodesFile({"127.0.0.1:7001", "[::1]:7003"});
  ExpectInvalid(config, "lists no key for peers[1] localhost:7002");
  config.peer_known_nodes_file = "/nonexistent/known_nodes";
  ExpectInvalid(config, "peer_known_nodes_file: /nonexistent/known_nodes: cannot open");
}

TEST(PeerConfigTest, LoopbackNeedsNoTls) {
  EXPECT_TRUE(ValidatePeerConfig(Loopback()).ok()) << ValidatePeerConfig(Loopback());
  DaemonConfig any_port = Loopback();
  any_port.peer_listen = "127.0.0.1:0";
  EXPECT_TRUE(ValidatePeerConfig(any_port).ok());
}

TEST(PeerConfigTest, BadAddressesNameTheKey) {
  struct Case {
    std::string peer_listen, node_name;
    std::vector<std::string> peers;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"127.0.0.1", "", {}, "peer_listen: \"127.0.0.1\": expected unix:PATH or host:port"},
      {"127.0.0.1:70000", "", {}, "peer_listen: \"127.0.0.1:70000\": port must be 0..65535"},
      {"::1:7000", "", {}, "peer_listen: \"::1:7000\": write an IPv6 host in brackets"},
      {"unix:/run/overlapd/peer.sock",
       "",
       {},
       "peer_listen: \"unix:/run/overlapd/peer.sock\": "
       "peers speak TCP"},
      {"127.0.0.1:7000",
       "127.0.0.1:0",
       {},
       "node_name: \"127.0.0.1:0\": port 0 names no "
       "listener"},
      {"127.0.0.1:7000", "node-1", {}, "node_name: \"node-1\": expected"},
      {"127.0.0.1:7000", "", {"127.0.0.1:7001", ":7002"}, "peers[1]: \":7002\": empty host"},
      {"127.0.0.1:7000", "", {"127.0.0.1:0"}, "peers[0]: \"127.0.0.1:0\": port 0"},
      {"127.0.0.1:7000", "", {"dns:///a:1"}, "peers[0]: \"dns:///a:1\": expected"},
      // ValidateClusterKeys' checks come along.
      {"127.0.0.1:7000",
       "",
       {"127.0.0.1:7001", "127.0.0.1:7001"},
       "peers[1]: \"127.0.0.1:7001\" "
       "is listed twice"},
      {"127.0.0.1:7000",
       "",
       {"127.0.0.1:7000"},
       "peers[0]: \"127.0.0.1:7000\" is this daemon "
       "itself"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    DaemonConfig config;
    config.peer_listen = c.peer_listen;
    config.node_name = c.node_name;
    config.peers = c.peers;
    ExpectInvalid(config, c.message);
  }
}

TEST(PeerConfigTest, OffLoopbackDaemonsSpeakMutualTls) {
  DaemonConfig config = Loopback();
  config.peer_listen = "0.0.0.0:7000";
  ExpectInvalid(config,
                "peer_listen: \"0.0.0.0:7000\": not a loopback address: daemons off loopback speak "
                "mutual TLS; set peer_tls_cert, peer_tls_key and peer_tls_ca");
  config = Loopback();
  config.peers.push_back("gpu-node-2.example:7000");
  ExpectInvalid(config,
                "peers[3]: \"gpu-node-2.example:7000\": not a loopback address: calls to "
                "it need mutual TLS");

  // Files are read here, and the certificate must name this node as its peers
  // check it.
  char pattern[] = "/tmp/ovl-peer-config-XXXXXX";
  const std::string dir = mkdtemp(pattern);
  ASSERT_TRUE(overlap::testing::RunInDir(
      dir, "printf 'subjectAltName=DNS:gpu-node-1.example,IP:10.0.0.1\\n' > node.ext"));
  ASSERT_TRUE(overlap::testing::MakeTestCa(dir, "ca"));
  ASSERT_TRUE(overlap::testing::MakeTestLeaf(dir, "node", "ca", "node.ext", "/CN=node"));
  config.peer_listen = "10.0.0.1:7000";
  config.peer_tls_cert = dir + "/node.pem";
  config.peer_tls_key = dir + "/node.key";
  config.peer_tls_ca = dir + "/ca.pem";
  config.peer_known_nodes_file.clear();  // the certificates prove the nodes
  EXPECT_TRUE(ValidatePeerConfig(config).ok()) << ValidatePeerConfig(config);
  DaemonConfig by_name = config;
  by_name.node_name = "gpu-node-1.example:7000";
  EXPECT_TRUE(ValidatePeerConfig(by_name).ok()) << ValidatePeerConfig(by_name);
  // A certificate that does not name the node is refused at start, with what it
  // names and how to fix it, not at the first job across daemons.
  DaemonConfig other = config;
  other.node_name = "gpu-node-9.example:7000";
  ExpectInvalid(other, "peer_tls_cert: " + config.peer_tls_cert +
                           " names CN=node, subjectAltName gpu-node-1.example, 10.0.0.1; not this "
                           "node (node_name gpu-node-9.example:7000), so its peers would refuse "
                           "every call it makes. Issue it with subjectAltName "
                           "DNS:gpu-node-9.example (or IP:gpu-node-9.example for an address)");
  // Nor one past its notAfter.
  const std::string pem = [&] {
    std::ifstream in(config.peer_tls_cert);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }();
  const absl::Status expired = CheckOwnCertificate(pem, config.peer_tls_cert, config.peer_listen,
                                                   absl::Now() + absl::Hours(24 * 365 * 20));
  EXPECT_EQ(expired.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(expired.message()), ::testing::HasSubstr(" expired at "));
  // A key where the certificate should be.
  DaemonConfig garbled = config;
  std::ofstream(dir + "/garbled.pem")
      << "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
  garbled.peer_tls_cert = dir + "/garbled.pem";
  ExpectInvalid(garbled, "peer_tls_cert: " + dir + "/garbled.pem: no certificate that parses");

  DaemonConfig partial = config;
  partial.peer_tls_ca = "";
  ExpectInvalid(partial,
                "peer_tls_cert, peer_tls_key and peer_tls_ca go together (mutual TLS "
                "between daemons); missing: peer_tls_ca");
  DaemonConfig swapped = config;
  swapped.peer_tls_key = config.peer_tls_cert;
  ExpectInvalid(swapped, "peer_tls_key: " + config.peer_tls_cert + " holds no PEM PRIVATE KEY");
  DaemonConfig missing = config;
  missing.peer_tls_ca = dir + "/missing.pem";
  ExpectInvalid(missing, "peer_tls_ca: cannot read " + dir + "/missing.pem");
  std::filesystem::remove_all(dir);
}

TEST(PeerConfigTest, ParsePeerAddress) {
  absl::StatusOr<PeerAddress> v6 = ParsePeerAddress("peers[0]", "[::1]:7000", false);
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 7000);
  EXPECT_TRUE(v6->loopback);
  absl::StatusOr<PeerAddress> named = ParsePeerAddress("peers[0]", "gpu-node-3:7000", false);
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->host, "gpu-node-3");
  EXPECT_FALSE(named->loopback);
  EXPECT_TRUE(ParsePeerAddress("peer_listen", "localhost:0", true)->loopback);
  EXPECT_TRUE(ParsePeerAddress("peer_listen", "127.3.4.5:1", true)->loopback);
  EXPECT_FALSE(ParsePeerAddress("peer_listen", "10.0.0.1:1", true)->loopback);
  EXPECT_EQ(ParsePeerAddress("peers[2]", "localhost:0", false).status().message(),
            "peers[2]: \"localhost:0\": port 0 names no listener: give the port the peer "
            "listens on");
}

}  // namespace
}  // namespace overlap::peer
