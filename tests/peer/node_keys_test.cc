// Node keys in key mode: each node's own Ed25519 key, the known-nodes file,
// tokens signed by the caller's node key, the callee's signed answers, and the
// nonce cache that makes a token good for one call; then a real listener that
// takes a call only from the node whose key signed it, once, and signs its
// answers.
#include "server/peer/node_keys.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "overlap/v1/peer.grpc.pb.h"
#include "server/peer/nonce_cache.h"
#include "server/peer/peer_auth.h"
#include "server/peer/peer_client.h"
#include "server/peer/peer_server.h"

namespace overlap::peer {
namespace {

using ::testing::HasSubstr;

constexpr char kClusterKey[] = "test-cluster-key-0123456789abcdef";

NodeKey MakeKey() {
  absl::StatusOr<NodeKey> key = NodeKey::Generate();
  EXPECT_TRUE(key.ok()) << key.status();
  return *key;
}

class NodeKeyFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/ovl-nodekey-XXXXXX";
    const char* made = mkdtemp(pattern);
    ASSERT_NE(made, nullptr);
    dir_ = made;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  std::string dir_;
};

TEST(NodeKeyTest, ASignatureVerifiesUnderItsOwnKeyOnly) {
  const NodeKey a = MakeKey();
  const NodeKey b = MakeKey();
  EXPECT_THAT(a.public_text(), ::testing::StartsWith(kPublicKeyPrefix));
  EXPECT_EQ(a.public_text().size(), std::string(kPublicKeyPrefix).size() + 64);
  EXPECT_NE(a.public_text(), b.public_text());
  const std::string signature = a.Sign("message");
  EXPECT_EQ(signature.size(), 128u);
  EXPECT_TRUE(VerifyNodeSignature(a.public_text(), "message", signature).ok());
  EXPECT_EQ(VerifyNodeSignature(b.public_text(), "message", signature).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(VerifyNodeSignature(a.public_text(), "messagE", signature).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(VerifyNodeSignature(a.public_text(), "message", signature.substr(2)).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(VerifyNodeSignature("ed25519:00", "message", signature).code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_F(NodeKeyFileTest, AKeyFileIsPrivateAndReadsBackToTheSameKey) {
  const std::string path = dir_ + "/node.key";
  absl::StatusOr<NodeKey> made = CreateNodeKey(path);
  ASSERT_TRUE(made.ok()) << made.status();
  struct stat info {};
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  absl::StatusOr<NodeKey> read = ReadNodeKey(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->public_text(), made->public_text());
  EXPECT_FALSE(CreateNodeKey(path).ok()) << "an existing key was overwritten";

  EXPECT_EQ(ReadNodeKey(dir_ + "/missing").status().code(), absl::StatusCode::kNotFound);
  ::chmod(path.c_str(), 0644);
  const absl::Status open = ReadNodeKey(path).status();
  EXPECT_EQ(open.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(open.message()), HasSubstr("peer_node_key_file: "));
  EXPECT_THAT(std::string(open.message()), HasSubstr("chmod 600"));
  const std::string garbage = dir_ + "/garbage.key";
  std::ofstream(garbage) << "not a key\n";
  ::chmod(garbage.c_str(), 0600);
  EXPECT_THAT(std::string(ReadNodeKey(garbage).status().message()),
              HasSubstr("not a node key (64 hex digits from `overlapd --make-node-key PATH`)"));
}

TEST(KnownNodesTest, LinesNameANodeAndItsKeyOnce) {
  const NodeKey a = MakeKey();
  const NodeKey b = MakeKey();
  absl::StatusOr<KnownNodes> known =
      ParseKnownNodes(absl::StrCat("# the cluster\n\n127.0.0.1:7000 ", a.public_text(),
                                   "\n  127.0.0.1:7001\t", b.public_text(), "  \n"),
                      "known");
  ASSERT_TRUE(known.ok()) << known.status();
  EXPECT_EQ(known->size(), 2u);
  EXPECT_EQ(known->at("127.0.0.1:7001"), b.public_text());

  const std::pair<std::string, std::string> bad[] = {
      {"127.0.0.1:7000\n", "line 1: expected NODE PUBLIC_KEY"},
      {"127.0.0.1:7000 ed25519:abc\n", "line 1: ed25519:abc is not a public key"},
      {absl::StrCat("a:1 ", a.public_text(), "\na:1 ", b.public_text(), "\n"),
       "line 2: node a:1 is listed twice"},
  };
  for (const auto& [text, message] : bad) {
    const absl::Status status = ParseKnownNodes(text, "known").status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(std::string(status.message()), HasSubstr("peer_known_nodes_file: known: "));
    EXPECT_THAT(std::string(status.message()), HasSubstr(message));
  }
}

PeerCallFacts Facts() {
  v1::CancelPartRequest request;
  request.mutable_global_id()->set_coordinator("127.0.0.1:7000");
  request.mutable_global_id()->set_job_id("job-000001");
  return PeerCallFacts{"CancelPart", "127.0.0.1:7000", "127.0.0.1:7001", CanonicalBytes(request)};
}

TEST(NodeTokenTest, ATokenIsTakenOnlyUnderTheCallersOwnNodeKey) {
  const NodeKey a = MakeKey();
  const NodeKey b = MakeKey();
  const PeerCallFacts facts = Facts();
  const absl::Time now = absl::Now();
  std::string nonce;
  const std::string token = SignPeerCall(kClusterKey, facts, now, &a, &nonce);
  absl::StatusOr<PeerToken> verified = VerifyPeerToken(kClusterKey, a.public_text(), facts.method,
                                                       facts.caller, facts.callee, token, now);
  ASSERT_TRUE(verified.ok()) << verified.status();
  EXPECT_EQ(verified->nonce, nonce);
  EXPECT_TRUE(CheckRequestMatchesToken(*verified, facts.request_bytes).ok());
  EXPECT_EQ(CheckRequestMatchesToken(*verified, facts.request_bytes + "x").code(),
            absl::StatusCode::kUnauthenticated);

  // Node b holds the cluster key and signs as a: refused.
  const std::string forged = SignPeerCall(kClusterKey, facts, now, &b);
  const absl::Status as_a = VerifyPeerToken(kClusterKey, a.public_text(), facts.method,
                                            facts.caller, facts.callee, forged, now)
                                .status();
  EXPECT_EQ(as_a.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(as_a.message()),
              HasSubstr("is not signed by the node key of 127.0.0.1:7000"));
  // The cluster key alone, where a node key is required: refused.
  const std::string unsigned_token = SignPeerCall(kClusterKey, facts, now);
  EXPECT_THAT(std::string(VerifyPeerToken(kClusterKey, a.public_text(), facts.method, facts.caller,
                                          facts.callee, unsigned_token, now)
                              .status()
                              .message()),
              HasSubstr("is not signed with a node key"));
  // a's signature does not make up for another cluster key.
  EXPECT_EQ(VerifyPeerToken("another-cluster-key-000000000", a.public_text(), facts.method,
                            facts.caller, facts.callee, token, now)
                .status()
                .code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(NodeTokenTest, AnAnswerIsTakenOnlyFromTheCalleeForThisCall) {
  const NodeKey callee = MakeKey();
  const NodeKey other = MakeKey();
  v1::HelloResponse response;
  response.set_node("127.0.0.1:7001");
  const PeerReplyFacts facts{
      "Hello", "127.0.0.1:7000",        "127.0.0.1:7001", "00112233445566778899aabb",
      0,       CanonicalBytes(response)};
  const std::string proof = SignPeerReply(callee, facts);
  EXPECT_TRUE(VerifyPeerReply(callee.public_text(), facts, proof).ok());
  EXPECT_EQ(VerifyPeerReply(other.public_text(), facts, proof).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(VerifyPeerReply(callee.public_text(), facts, "").message()),
              HasSubstr("answered without proof that it is that node"));
  std::vector<PeerReplyFacts> others(4, facts);
  others[0].nonce = "ffffffffffffffffffffffff";  // an answer to another call, replayed
  others[1].method = "AdmitPart";
  others[2].code = 7;
  others[3].response_bytes += "x";
  for (const PeerReplyFacts& changed : others) {
    EXPECT_EQ(VerifyPeerReply(callee.public_text(), changed, proof).code(),
              absl::StatusCode::kUnauthenticated);
  }
}

TEST(NonceCacheTest, ANonceIsTakenOnceWithinTheWindowAndTheCacheIsBounded) {
  NonceCache cache(3, absl::Minutes(2));
  const absl::Time now = absl::FromUnixSeconds(1000000);
  EXPECT_TRUE(cache.Remember("a", now, now).ok());
  const absl::Status again = cache.Remember("a", now, now + absl::Seconds(30));
  EXPECT_EQ(again.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(again.message()), HasSubstr("replayed"));
  EXPECT_TRUE(cache.Remember("b", now, now).ok());
  EXPECT_TRUE(cache.Remember("c", now, now).ok());
  // Full: refused rather than forgetting a live nonce.
  EXPECT_EQ(cache.Remember("d", now, now).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cache.size(), 3u);
  // Past the window the tokens are refused by their time; their nonces go.
  EXPECT_TRUE(cache.Remember("d", now + absl::Minutes(3), now + absl::Minutes(3)).ok());
  EXPECT_EQ(cache.size(), 1u);
}

// A real listener with node keys: nodes a and b hold the cluster key, the
// callee lists both.
class NodeKeyServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = std::make_shared<const NodeKey>(MakeKey());
    b_ = std::make_shared<const NodeKey>(MakeKey());
    callee_key_ = std::make_shared<const NodeKey>(MakeKey());
    PeerServerOptions options;
    options.listen = "127.0.0.1:0";
    options.cluster_key = kClusterKey;
    options.node_key = callee_key_;
    options.known_nodes = {{kA, a_->public_text()}, {kB, b_->public_text()}};
    absl::StatusOr<std::unique_ptr<PeerServer>> server =
        PeerServer::Start(options, nullptr, PeerHello{"host", 2, ""});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    absl::StatusOr<std::unique_ptr<v1::Peers::Stub>> stub =
        NewPeerStub(PeerChannelOptions{}, server_->listen_address());
    ASSERT_TRUE(stub.ok()) << stub.status();
    stub_ = std::move(*stub);
  }

  // Node `node` as this test's callers know it: the callee's key listed.
  PeerIdentity As(const std::string& node, std::shared_ptr<const NodeKey> key) {
    return PeerIdentity{
        node, kClusterKey, std::move(key), {{server_->node_name(), callee_key_->public_text()}}};
  }

  static constexpr char kA[] = "127.0.0.1:7000";
  static constexpr char kB[] = "127.0.0.1:7001";
  std::shared_ptr<const NodeKey> a_, b_, callee_key_;
  std::unique_ptr<PeerServer> server_;
  std::unique_ptr<v1::Peers::Stub> stub_;
};

TEST_F(NodeKeyServerTest, ACallIsTakenFromTheNodeWhoseKeySignedItOnceAndItsAnswerIsSigned) {
  absl::StatusOr<v1::HelloResponse> hello =
      Hello(*stub_, server_->listen_address(), As(kA, a_), absl::Seconds(10));
  ASSERT_TRUE(hello.ok()) << hello.status();

  // b speaking as a, with b's own node key; a node nobody listed; no node key.
  const std::pair<PeerIdentity, std::string> refused[] = {
      {As(kA, b_), "is not signed by the node key of 127.0.0.1:7000"},
      {As("127.0.0.1:7009", b_),
       "node 127.0.0.1:7009 has no key in this daemon's "
       "peer_known_nodes_file"},
      {As(kA, nullptr), "is not signed with a node key"},
  };
  for (const auto& [who, message] : refused) {
    hello = Hello(*stub_, server_->listen_address(), who, absl::Seconds(10));
    EXPECT_EQ(hello.status().code(), absl::StatusCode::kUnauthenticated) << message;
    EXPECT_THAT(std::string(hello.status().message()), HasSubstr(message));
  }

  // The same token twice: the second is a replay.
  v1::HelloRequest request;
  request.set_node(kA);
  const std::string token = SignPeerCall(
      kClusterKey, PeerCallFacts{"Hello", kA, server_->node_name(), CanonicalBytes(request)},
      absl::Now(), a_.get());
  std::vector<grpc::StatusCode> codes;
  std::string last_message;
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext context;
    context.AddMetadata(kVersionHeader, OVERLAP_VERSION);
    context.AddMetadata(kNodeHeader, kA);
    context.AddMetadata(kAuthHeader, token);
    v1::HelloResponse response;
    const grpc::Status status = stub_->Hello(&context, request, &response);
    codes.push_back(status.error_code());
    last_message = status.error_message();
  }
  EXPECT_EQ(codes, (std::vector<grpc::StatusCode>{grpc::StatusCode::OK,
                                                  grpc::StatusCode::UNAUTHENTICATED}));
  EXPECT_THAT(last_message, HasSubstr("replayed"));
}

TEST_F(NodeKeyServerTest, AnAnswerNotSignedByTheListedCalleeIsRefused) {
  // The caller lists another key for this callee, as if an impostor held its port.
  PeerIdentity self = As(kA, a_);
  self.known_nodes[server_->node_name()] = b_->public_text();
  const absl::StatusOr<v1::HelloResponse> hello =
      Hello(*stub_, server_->listen_address(), self, absl::Seconds(10));
  EXPECT_EQ(hello.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(hello.status().message()),
              HasSubstr("answered without a valid signature of the node key"));
}

}  // namespace
}  // namespace overlap::peer
