#include "server/peer/peer_auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace overlap::peer {
namespace {

// A key file larger than this is not a key.
constexpr off_t kMaxKeyFileBytes = 4096;
// Names the token's layout, so that a later one can be told from it.
constexpr char kTokenVersion[] = "v2";
constexpr size_t kNonceBytes = 12;
constexpr size_t kHashHexDigits = 64;

std::string Hex(const unsigned char* data, size_t size) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(data), size));
}

// Everything a token vouches for; each part on its own line, and none of them
// can hold a newline (node names are HOST:PORT, the rest hex or digits), so no
// two different calls share a message.
std::string CallMessage(absl::string_view method, absl::string_view caller,
                        absl::string_view callee, absl::string_view time_ms,
                        absl::string_view nonce, absl::string_view request_hash) {
  return absl::StrCat("overlapd-peer-", kTokenVersion, "\n", method, "\n", caller, "\n", callee,
                      "\n", time_ms, "\n", nonce, "\n", request_hash);
}

std::string Mac(absl::string_view key, absl::string_view message) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &size);
  return Hex(mac, size);
}

std::string ReplyMessage(const PeerReplyFacts& facts) {
  return absl::StrCat("overlapd-peer-reply-", kTokenVersion, "\n", facts.method, "\n", facts.caller,
                      "\n", facts.callee, "\n", facts.nonce, "\n", facts.code, "\n",
                      Sha256Hex(facts.response_bytes));
}

absl::Status FileError(absl::string_view config_key, const std::string& path,
                       absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(config_key, ": ", path, ": ", why));
}

bool IsHex(absl::string_view text) {
  for (char c : text) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

std::string Sha256Hex(absl::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(), nullptr);
  return Hex(digest, size);
}

absl::StatusOr<std::string> ReadSecretFile(const std::string& path, absl::string_view config_key,
                                           absl::string_view what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(config_key, ": ", path, ": no such file"));
    }
    return FileError(config_key, path,
                     absl::StrCat("cannot open (", std::strerror(errno),
                                  errno == ELOOP ? "; a symlink is not taken" : "", ")"));
  }
  struct stat info {};
  std::string key;
  absl::Status status;
  if (::fstat(fd, &info) != 0) {
    status = FileError(config_key, path, std::strerror(errno));
  } else if (!S_ISREG(info.st_mode)) {
    status = FileError(config_key, path, "not a regular file");
  } else if ((info.st_mode & 077) != 0) {
    status = FileError(config_key, path,
                       absl::StrFormat("mode 0%o lets other users read or change the %s: "
                                       "chmod 600 it",
                                       info.st_mode & 0777, std::string(what)));
  } else if (info.st_size > kMaxKeyFileBytes) {
    status = FileError(
        config_key, path,
        absl::StrCat(info.st_size, " bytes is not a key (at most ", kMaxKeyFileBytes, ")"));
  } else {
    key.resize(static_cast<size_t>(info.st_size));
    const ssize_t got = ::read(fd, key.data(), key.size());
    if (got != static_cast<ssize_t>(key.size())) status = FileError(config_key, path, "short read");
  }
  ::close(fd);
  if (!status.ok()) return status;
  while (!key.empty() && absl::ascii_isspace(static_cast<unsigned char>(key.back()))) {
    key.pop_back();
  }
  return key;
}

absl::Status WriteSecretFile(const std::string& path, absl::string_view config_key,
                             absl::string_view text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return FileError(config_key, path, absl::StrCat("cannot create (", std::strerror(errno), ")"));
  }
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!written || !synced) {
    ::unlink(path.c_str());
    return FileError(config_key, path, "cannot write (disk full?)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadClusterKey(const std::string& path) {
  ASSIGN_OR_RETURN(std::string key, ReadSecretFile(path, "peer_key_file", "cluster key"));
  if (key.size() < kMinClusterKeyBytes) {
    return FileError(
        "peer_key_file", path,
        absl::StrCat("holds ", key.size(), " bytes; a key has at least ", kMinClusterKeyBytes,
                     " (64 hex digits from `overlapd --make-cluster-key PATH`)"));
  }
  return key;
}

absl::StatusOr<std::string> CreateClusterKey(const std::string& path) {
  unsigned char random[32];
  if (RAND_bytes(random, sizeof(random)) != 1) {
    return absl::InternalError("no random bytes for a cluster key (OpenSSL's RAND_bytes)");
  }
  const std::string key = Hex(random, sizeof(random));
  OPENSSL_cleanse(random, sizeof(random));
  RETURN_IF_ERROR(WriteSecretFile(path, "peer_key_file", key + "\n"));
  return key;
}

std::string CanonicalBytes(const google::protobuf::Message& request) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    request.SerializeToCodedStream(&coded);
  }
  return bytes;
}

std::string SignPeerCall(absl::string_view key, const PeerCallFacts& facts, absl::Time now,
                         const NodeKey* node_key, std::string* nonce_out) {
  unsigned char random[kNonceBytes];
  RAND_bytes(random, sizeof(random));
  const std::string nonce = Hex(random, sizeof(random));
  const std::string time_ms = absl::StrCat(absl::ToUnixMillis(now));
  const std::string hash = Sha256Hex(facts.request_bytes);
  const std::string message =
      CallMessage(facts.method, facts.caller, facts.callee, time_ms, nonce, hash);
  if (nonce_out != nullptr) *nonce_out = nonce;
  return absl::StrCat(kTokenVersion, ":", time_ms, ":", nonce, ":", hash, ":", Mac(key, message),
                      ":", node_key != nullptr ? node_key->Sign(message) : "");
}

absl::StatusOr<PeerToken> VerifyPeerToken(absl::string_view key,
                                          absl::string_view caller_public_key,
                                          absl::string_view method, absl::string_view caller,
                                          absl::string_view callee, absl::string_view token,
                                          absl::Time now) {
  if (token.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "the call carries no ", kAuthHeader, " token: this daemon takes peer calls only from "
        "daemons that hold its cluster key (peer_key_file)"));
  }
  // v2:TIME:NONCE:REQUEST_HASH:MAC:SIGNATURE (the signature "" without a node key)
  const std::vector<absl::string_view> parts = absl::StrSplit(token, ':');
  int64_t time_ms = 0;
  if (parts.size() != 6 || parts[0] != kTokenVersion || !absl::SimpleAtoi(parts[1], &time_ms) ||
      parts[2].size() != 2 * kNonceBytes || !IsHex(parts[2]) || parts[3].size() != kHashHexDigits ||
      !IsHex(parts[3]) || parts[4].size() != 64) {
    return absl::UnauthenticatedError(absl::StrCat("malformed ", kAuthHeader, " token"));
  }
  const absl::Duration skew = absl::AbsDuration(now - absl::FromUnixMillis(time_ms));
  if (skew > kPeerAuthWindow) {
    return absl::UnauthenticatedError(
        absl::StrCat("the call's token is ", absl::FormatDuration(skew),
                     " away from this daemon's clock (at most ",
                     absl::FormatDuration(kPeerAuthWindow),
                     "): an old call replayed, or the nodes' clocks disagree (run chrony/NTP)"));
  }
  const std::string message = CallMessage(method, caller, callee, parts[1], parts[2], parts[3]);
  const std::string expected = Mac(key, message);
  if (CRYPTO_memcmp(expected.data(), parts[4].data(), expected.size()) != 0) {
    return absl::UnauthenticatedError(absl::StrCat(
        "the call's token was not made with this daemon's cluster key for this call from ", caller,
        ": the nodes' peer_key_file must hold the same key"));
  }
  if (!caller_public_key.empty()) {
    if (parts[5].empty()) {
      return absl::UnauthenticatedError(
          absl::StrCat("the call from ", caller,
                       " is not signed with a node key: this daemon takes calls "
                       "only from nodes whose key its peer_known_nodes_file lists"));
    }
    if (!VerifyNodeSignature(caller_public_key, message, parts[5]).ok()) {
      return absl::UnauthenticatedError(absl::StrCat(
          "the call is not signed by the node key of ", caller,
          " that peer_known_nodes_file lists: another node (or a process holding the cluster "
          "key) speaking as it, or its key changed"));
    }
  }
  return PeerToken{std::string(parts[2]), std::string(parts[3]), absl::FromUnixMillis(time_ms)};
}

absl::Status CheckRequestMatchesToken(const PeerToken& token, absl::string_view request_bytes) {
  const std::string hash = Sha256Hex(request_bytes);
  if (CRYPTO_memcmp(hash.data(), token.request_hash.data(),
                    std::min(hash.size(), token.request_hash.size())) == 0 &&
      hash.size() == token.request_hash.size()) {
    return absl::OkStatus();
  }
  return absl::UnauthenticatedError(
      "the call's token was made for another request than the one it carries");
}

absl::Status VerifyPeerCall(absl::string_view key, const PeerCallFacts& facts,
                            absl::string_view token, absl::Time now) {
  absl::StatusOr<PeerToken> verified =
      VerifyPeerToken(key, "", facts.method, facts.caller, facts.callee, token, now);
  if (!verified.ok()) return verified.status();
  return CheckRequestMatchesToken(*verified, facts.request_bytes);
}

std::string SignPeerReply(const NodeKey& callee_key, const PeerReplyFacts& facts) {
  return absl::StrCat(kTokenVersion, ":", callee_key.Sign(ReplyMessage(facts)));
}

absl::Status VerifyPeerReply(absl::string_view callee_public_key, const PeerReplyFacts& facts,
                             absl::string_view proof) {
  absl::string_view signature = proof;
  if (proof.empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat("node ", facts.callee, " answered without proof that it is that node (no ",
                     kCalleeProofHeader, "): whatever listens on its port is not its daemon"));
  }
  if (!absl::ConsumePrefix(&signature, absl::StrCat(kTokenVersion, ":")) ||
      !VerifyNodeSignature(callee_public_key, ReplyMessage(facts), signature).ok()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "node ", facts.callee,
        " answered without a valid signature of the node key "
        "peer_known_nodes_file lists for it: whatever listens on its port is not its daemon, "
        "or its key changed"));
  }
  return absl::OkStatus();
}

absl::Status CheckCertificateNamesNode(const PeerCertificate& certificate,
                                       const std::string& node) {
  const size_t colon = node.rfind(':');
  std::string host = node.substr(0, colon == std::string::npos ? node.size() : colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  for (const std::string& name : certificate.subject_alt_names) {
    if (absl::EqualsIgnoreCase(name, host)) return absl::OkStatus();
  }
  if (!certificate.common_name.empty() &&
      (absl::EqualsIgnoreCase(certificate.common_name, host) || certificate.common_name == node)) {
    return absl::OkStatus();
  }
  return absl::UnauthenticatedError(absl::StrCat(
      "the caller's certificate (CN=", absl::CHexEscape(certificate.common_name.substr(0, 100)),
      ") does not name the node ", node,
      " it speaks as: a node's certificate must hold its host in subjectAltName"));
}

}  // namespace overlap::peer
