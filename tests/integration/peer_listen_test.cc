// The peer listener of the real overlapd: with peer_listen it starts, logs the
// address it bound, answers Hello as the daemon (its backend, devices and
// name) and refuses job calls while no handler runs them; settings that cannot
// work stop the daemon at start (exit 2) with the reason.
#include <grpcpp/create_channel.h>

#include <regex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "overlap/v1/peer.grpc.pb.h"
#include "server/peer/node_keys.h"
#include "server/peer/peer_auth.h"
#include "server/peer/peer_client.h"
#include "tests/integration/harness.h"
#include "tests/openssl_util.h"

namespace overlap::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kDaemonUsage = 2;  // overlapd: a config error

class PeerListenTest : public DaemonTest {
 protected:
  std::string Config(const std::string& yaml) {
    const std::string path = dir_.File("peer.yaml");
    WriteFileOrDie(path, yaml);
    return path;
  }

  // The address the log says the peer listener bound ("" when not logged in time).
  std::string PeerAddress() {
    const std::regex logged("peer listener on (127\\.0\\.0\\.1:[0-9]+): node ([^,]+), peers: ");
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    std::smatch match;
    std::string log;
    while (Clock::now() < deadline) {
      log = daemon_->Log();
      if (std::regex_search(log, match, logged)) {
        EXPECT_EQ(match[2].str(), match[1].str()) << "node_name defaults to the bound address";
        return match[1].str();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "no peer listener address in the log:\n" << log;
    return "";
  }

  // overlapd with `yaml` must refuse to start (exit 2) saying `reason`.
  void ExpectRefusedAtStart(const std::string& yaml, const std::string& reason) {
    const std::vector<std::string> argv = {OVERLAPD_BIN,
                                           "--backend",
                                           "host",
                                           "--listen",
                                           "unix:" + dir_.File("refused.sock"),
                                           "--state-dir",
                                           dir_.File("state"),
                                           "--config",
                                           Config(yaml)};
    RunResult r = Child::Spawn(argv, dir_.path())->Wait(std::chrono::seconds(20));
    EXPECT_EQ(r.exit_code, kDaemonUsage) << Describe(r);
    EXPECT_THAT(r.err + r.out, HasSubstr(reason));
  }
};

TEST_F(PeerListenTest, StartsLogsItsAddressAndAnswersHello) {
  const std::string key_file = WriteClusterKey(dir_.File("cluster.key"));
  // The peer it lists, and a node whose key it knows but does not list.
  const TestNodeKeys node_keys = MakeTestNodeKeys(dir_.path(), {"127.0.0.1:1", "127.0.0.1:9"});
  ASSERT_EQ(node_keys.error, "");
  StartDaemon({"--config", Config("peer_listen: 127.0.0.1:0\npeers: [\"127.0.0.1:1\"]\n"
                                  "peer_key_file: " +
                                  key_file +
                                  "\n"
                                  "peer_known_nodes_file: " +
                                  node_keys.known_nodes_file + "\n")});
  const std::string address = PeerAddress();
  ASSERT_FALSE(address.empty());
  std::unique_ptr<v1::Peers::Stub> stub =
      v1::Peers::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  absl::StatusOr<std::string> key = peer::ReadClusterKey(key_file);
  ASSERT_TRUE(key.ok()) << key.status();
  auto node_key = [&](size_t i) {
    absl::StatusOr<peer::NodeKey> read = peer::ReadNodeKey(node_keys.key_files[i]);
    EXPECT_TRUE(read.ok()) << read.status();
    return std::make_shared<const peer::NodeKey>(*read);
  };
  // The daemon made its own node key in its state dir, and logged its public key.
  absl::StatusOr<peer::NodeKey> daemon_key = peer::ReadNodeKey(daemon_->state_dir() + "/node.key");
  ASSERT_TRUE(daemon_key.ok()) << daemon_key.status();
  EXPECT_THAT(daemon_->Log(), HasSubstr("made a new node key in " + daemon_->state_dir() +
                                        "/node.key: list this node in the other nodes' "
                                        "peer_known_nodes_file as: "));
  EXPECT_THAT(daemon_->Log(), HasSubstr(" " + daemon_key->public_text()));
  const peer::PeerIdentity listed{
      "127.0.0.1:1", *key, node_key(0), {{address, daemon_key->public_text()}}};
  {
    // Its answer is signed by its own node key, which the caller checks.
    const absl::StatusOr<v1::HelloResponse> hello =
        peer::Hello(*stub, address, listed, absl::Seconds(10));
    ASSERT_TRUE(hello.ok()) << hello.status();
    peer::PeerIdentity expecting_another = listed;
    expecting_another.known_nodes[address] = node_keys.public_keys[1];
    EXPECT_EQ(peer::Hello(*stub, address, expecting_another, absl::Seconds(10)).status().code(),
              absl::StatusCode::kUnauthenticated);
  }
  {
    // The cluster key without the node's own signature is not enough.
    const absl::StatusOr<v1::HelloResponse> hello =
        peer::Hello(*stub, address, peer::PeerIdentity{"127.0.0.1:1", *key}, absl::Seconds(10));
    EXPECT_EQ(hello.status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_THAT(std::string(hello.status().message()), HasSubstr("is not signed with a node key"));
  }
  {
    v1::HelloRequest request;
    request.set_node(listed.node);
    grpc::ClientContext context;
    peer::PreparePeerContext(&context, absl::Seconds(10), listed, "Hello", address, request);
    v1::HelloResponse response;
    const grpc::Status status = stub->Hello(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.version(), OVERLAP_VERSION);
    EXPECT_EQ(response.backend(), "host");
    EXPECT_EQ(response.device_count(), 4);  // the harness's --host-devices
    EXPECT_EQ(response.node(), address);
  }
  {
    // Without the key's proof, even Hello is refused.
    grpc::ClientContext context;
    context.AddMetadata("overlapd-version", OVERLAP_VERSION);
    context.AddMetadata("overlapd-node", listed.node);
    v1::HelloResponse response;
    const grpc::Status status = stub->Hello(&context, v1::HelloRequest(), &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext context;
    context.AddMetadata("overlapd-version", "0.0.9");
    v1::HelloResponse response;
    const grpc::Status status = stub->Hello(&context, v1::HelloRequest(), &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(status.error_message(),
                HasSubstr(std::string("peer runs overlapd 0.0.9, this daemon ") + OVERLAP_VERSION));
  }
  {
    // A caller with the key that is not in peers: proves who it is, and is
    // still no coordinator of this daemon's.
    const peer::PeerIdentity stranger{"127.0.0.1:9", *key, node_key(1)};
    v1::AdmitPartRequest request;
    request.mutable_global_id()->set_coordinator(stranger.node);
    grpc::ClientContext context;
    peer::PreparePeerContext(&context, absl::Seconds(10), stranger, "AdmitPart", address,
                             request);
    v1::AdmitPartResponse response;
    const grpc::Status status = stub->AdmitPart(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_THAT(status.error_message(), HasSubstr("\"127.0.0.1:9\" is not in the peers:"));
  }
  RunResult stopped = daemon_->Terminate(std::chrono::seconds(30));
  EXPECT_EQ(stopped.exit_code, 0) << Describe(stopped);
  EXPECT_THAT(stopped.err, HasSubstr("peer listener stopped"));
}

TEST_F(PeerListenTest, WithoutPeerListenThereIsNoPeerListener) {
  StartDaemon();
  EXPECT_THAT(daemon_->Log(), ::testing::Not(HasSubstr("peer listener")));
}

TEST_F(PeerListenTest, SettingsThatCannotWorkStopTheDaemonAtStart) {
  ExpectRefusedAtStart(
      "peer_listen: 0.0.0.0:7000\n",
      "peer_listen: \"0.0.0.0:7000\": not a loopback address: daemons off "
      "loopback speak mutual TLS; set peer_tls_cert, peer_tls_key and peer_tls_ca");
  ExpectRefusedAtStart("peer_listen: 127.0.0.1:0\npeers: [\"127.0.0.1:1\", \"127.0.0.1\"]\n",
                       "peers[1]: \"127.0.0.1\": expected");
  ExpectRefusedAtStart("peer_listen: 127.0.0.1:0\npeers: [\"10.9.8.7:7000\"]\n",
                       "peers[0]: \"10.9.8.7:7000\": not a loopback address");
  ExpectRefusedAtStart("peer_listen: 127.0.0.1:7000\npeers: [\"127.0.0.1:7000\"]\n",
                       "is this daemon itself");
  ExpectRefusedAtStart("peer_listen: 127.0.0.1:0\npeers: [\"127.0.0.1:1\"]\n",
                       "peer_known_nodes_file: needed when peers are listed without peer TLS");
  ExpectRefusedAtStart("peer_listen: 127.0.0.1:0\npeer_tls_cert: " + dir_.File("missing.pem") +
                           "\npeer_tls_key: " + dir_.File("missing.key") +
                           "\npeer_tls_ca: " + dir_.File("ca.pem") + "\n",
                       "peer_tls_cert: cannot read " + dir_.File("missing.pem"));
  ExpectRefusedAtStart("cluster_hold_timeout_ms: 0\n",
                       "cluster_hold_timeout_ms: must be a positive integer");
}

// Off loopback with mutual TLS: a certificate that does not name the node
// stops the daemon at start; on the host backend Gloo's plaintext data plane
// needs gloo_private_network; with it, the daemon serves.
TEST_F(PeerListenTest, OffLoopbackTheCertificateAndGlooPolicyAreCheckedAtStart) {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "the openssl CLI is not installed (scripts/install-deps.sh installs it)";
  }
  ASSERT_TRUE(RunInDir(dir_.path(),
                       "printf 'subjectAltName=DNS:node-a.example,IP:127.0.0.1\\n"
                       "extendedKeyUsage=serverAuth,clientAuth\\n' > node.ext"));
  ASSERT_TRUE(MakeTestCa(dir_.path(), "ca"));
  ASSERT_TRUE(MakeTestLeaf(dir_.path(), "node", "ca", "node.ext", "/CN=node"));
  const std::string tls = "peer_tls_cert: " + dir_.File("node.pem") +
                          "\npeer_tls_key: " + dir_.File("node.key") +
                          "\npeer_tls_ca: " + dir_.File("ca.pem") + "\n";
  ExpectRefusedAtStart("peer_listen: 0.0.0.0:0\nnode_name: node-b.example:7000\n" + tls,
                       "names CN=node, subjectAltName node-a.example, 127.0.0.1; not this node "
                       "(node_name node-b.example:7000)");
  const std::string off_loopback = "peer_listen: 0.0.0.0:0\nnode_name: node-a.example:7000\n" + tls;
  ExpectRefusedAtStart(off_loopback,
                       "gloo_private_network: jobs across daemons on the host backend run over "
                       "Gloo, which sends tensors as plaintext TCP, and 0.0.0.0:0 is not a "
                       "loopback address");
  StartDaemon({"--config", Config(off_loopback + "gloo_private_network: true\n")});
  EXPECT_THAT(daemon_->Log(), HasSubstr("peer listener"));
}

}  // namespace
}  // namespace overlap::testing
