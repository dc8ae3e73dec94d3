// The proofs peer calls carry: the cluster key file's rules, the tokens made
// with it and what each is bound to, and a certificate's names.
#include "server/peer/peer_auth.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "overlap/v1/peer.pb.h"

namespace overlap::peer {
namespace {

using ::testing::HasSubstr;

class KeyFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/ovl-key-XXXXXX";
    const char* made = mkdtemp(pattern);
    ASSERT_NE(made, nullptr);
    dir_ = made;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  std::string Write(const std::string& name, const std::string& text, mode_t mode) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    ::chmod(path.c_str(), mode);
    return path;
  }
  std::string dir_;
};

TEST_F(KeyFileTest, AKeyIsReadWithoutItsTrailingNewline) {
  const std::string path = Write("k", "0123456789abcdef0123\n", 0600);
  absl::StatusOr<std::string> key = ReadClusterKey(path);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(*key, "0123456789abcdef0123");
  EXPECT_TRUE(ReadClusterKey(Write("r", "0123456789abcdef0123", 0400)).ok());
}

TEST_F(KeyFileTest, AKeyOthersCouldReadOrTooShortOrMissingIsRefused) {
  struct Case {
    std::string path;
    absl::StatusCode code;
    std::string message;
  };
  ::symlink((dir_ + "/k").c_str(), (dir_ + "/link").c_str());
  Write("k", "0123456789abcdef0123", 0600);
  const std::vector<Case> cases = {
      {Write("group", "0123456789abcdef0123", 0640), absl::StatusCode::kInvalidArgument,
       "mode 0640 lets other users read or change the cluster key: chmod 600 it"},
      {Write("world", "0123456789abcdef0123", 0604), absl::StatusCode::kInvalidArgument,
       "mode 0604"},
      {Write("short", "tiny\n", 0600), absl::StatusCode::kInvalidArgument,
       "holds 4 bytes; a key has at least 16"},
      {Write("big", std::string(5000, 'k'), 0600), absl::StatusCode::kInvalidArgument,
       "5000 bytes is not a key"},
      {dir_ + "/link", absl::StatusCode::kInvalidArgument, "a symlink is not taken"},
      {dir_, absl::StatusCode::kInvalidArgument, "not a regular file"},
      {dir_ + "/missing", absl::StatusCode::kNotFound, "no such file"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    absl::StatusOr<std::string> key = ReadClusterKey(c.path);
    ASSERT_FALSE(key.ok());
    EXPECT_EQ(key.status().code(), c.code);
    EXPECT_THAT(std::string(key.status().message()), HasSubstr(c.message));
    EXPECT_THAT(std::string(key.status().message()), HasSubstr("peer_key_file: "));
  }
}

TEST_F(KeyFileTest, AMadeKeyIsPrivateRandomAndNeverOverwritten) {
  const std::string path = dir_ + "/cluster.key";
  absl::StatusOr<std::string> made = CreateClusterKey(path);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(made->size(), 64u);
  struct stat info {};
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_EQ(ReadClusterKey(path).value_or(""), *made);
  EXPECT_FALSE(CreateClusterKey(path).ok()) << "an existing key was overwritten";
  EXPECT_EQ(ReadClusterKey(path).value_or(""), *made);
  absl::StatusOr<std::string> other = CreateClusterKey(dir_ + "/other.key");
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *made);
}

PeerCallFacts Facts() {
  v1::StoreSetRequest request;
  request.mutable_global_id()->set_coordinator("127.0.0.1:7000");
  request.mutable_global_id()->set_job_id("job-000001");
  request.set_key("rank_0");
  request.set_value(std::string("\0addr", 5));
  return PeerCallFacts{"StoreSet", "127.0.0.1:7001", "127.0.0.1:7000", CanonicalBytes(request)};
}

TEST(PeerTokenTest, ATokenProvesOneCallOnly) {
  const std::string key = "cluster-key-0123456789";
  const absl::Time now = absl::Now();
  const std::string token = SignPeerCall(key, Facts(), now);
  EXPECT_TRUE(VerifyPeerCall(key, Facts(), token, now).ok());
  EXPECT_TRUE(VerifyPeerCall(key, Facts(), token, now + absl::Seconds(90)).ok());
  EXPECT_NE(SignPeerCall(key, Facts(), now), token) << "two tokens alike: no nonce";

  std::vector<PeerCallFacts> others(5, Facts());
  others[0].method = "StoreGet";
  others[1].caller = "127.0.0.1:7002";
  others[2].callee = "127.0.0.1:7003";
  others[3].request_bytes += "x";
  others[4].request_bytes.clear();
  for (const PeerCallFacts& other : others) {
    const absl::Status status = VerifyPeerCall(key, other, token, now);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated);
  }
  EXPECT_EQ(VerifyPeerCall("another-key-0123456789", Facts(), token, now).code(),
            absl::StatusCode::kUnauthenticated);
  const absl::Status late = VerifyPeerCall(key, Facts(), token, now + absl::Minutes(3));
  EXPECT_EQ(late.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(late.message()), HasSubstr("away from this daemon's clock"));
  EXPECT_EQ(VerifyPeerCall(key, Facts(), token, now - absl::Minutes(3)).code(),
            absl::StatusCode::kUnauthenticated);
  for (const std::string& bad :
       {std::string(), std::string("v1"), token.substr(0, 40), "v1" + token.substr(2), token + ":x",
        token.substr(0, 3) + "x" + token.substr(4)}) {
    EXPECT_EQ(VerifyPeerCall(key, Facts(), bad, now).code(), absl::StatusCode::kUnauthenticated)
        << bad;
  }
}

TEST(PeerCertificateTest, ACertificateNamesTheNodesOfItsHost) {
  PeerCertificate node7{"node-7", {"node-7.cluster", "10.0.0.7"}};
  EXPECT_TRUE(CheckCertificateNamesNode(node7, "node-7.cluster:7000").ok());
  EXPECT_TRUE(CheckCertificateNamesNode(node7, "NODE-7.cluster:7000").ok());
  EXPECT_TRUE(CheckCertificateNamesNode(node7, "10.0.0.7:7000").ok());
  EXPECT_TRUE(CheckCertificateNamesNode(node7, "node-7:7000").ok());  // its common name
  const absl::Status other = CheckCertificateNamesNode(node7, "10.0.0.8:7000");
  EXPECT_EQ(other.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(other.message()),
              HasSubstr("(CN=node-7) does not name the node 10.0.0.8:7000"));
  EXPECT_TRUE(CheckCertificateNamesNode({"", {"::1"}}, "[::1]:7000").ok());
  EXPECT_TRUE(CheckCertificateNamesNode({"gpu1:7000", {}}, "gpu1:7000").ok());
  EXPECT_FALSE(CheckCertificateNamesNode({"gpu1:7000", {}}, "gpu1:7001").ok());
  EXPECT_FALSE(CheckCertificateNamesNode({}, "gpu1:7000").ok());
}

}  // namespace
}  // namespace overlap::peer
