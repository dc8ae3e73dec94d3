#include "server/peer/peer_auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace overlap::peer {
namespace {

// A key file larger than this is not a key.
constexpr off_t kMaxKeyFileBytes = 4096;
// Names the token's layout, so that a later one can be told from it.
constexpr char kTokenVersion[] = "v1";
constexpr size_t kNonceBytes = 12;

std::string Hex(const unsigned char* data, size_t size) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(data), size));
}

// The MAC of everything a token vouches for; each part on its own line, and
// none of them can hold a newline (node names are HOST:PORT, the rest hex or
// digits), so no two different calls share a message.
std::string Mac(absl::string_view key, const PeerCallFacts& facts, absl::string_view time_ms,
                absl::string_view nonce) {
  const std::string message =
      absl::StrCat("overlapd-peer-", kTokenVersion, "\n", facts.method, "\n", facts.caller, "\n",
                   facts.callee, "\n", time_ms, "\n", nonce, "\n", Sha256Hex(facts.request_bytes));
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &size);
  return Hex(mac, size);
}

absl::Status KeyError(const std::string& path, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("peer_key_file: ", path, ": ", why));
}

}  // namespace

std::string Sha256Hex(absl::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(), nullptr);
  return Hex(digest, size);
}


absl::StatusOr<std::string> ReadClusterKey(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat("peer_key_file: ", path, ": no such file"));
    }
    return KeyError(path, absl::StrCat("cannot open (", std::strerror(errno),
                                       errno == ELOOP ? "; a symlink is not taken" : "", ")"));
  }
  struct stat info {};
  std::string key;
  absl::Status status;
  if (::fstat(fd, &info) != 0) {
    status = KeyError(path, std::strerror(errno));
  } else if (!S_ISREG(info.st_mode)) {
    status = KeyError(path, "not a regular file");
  } else if ((info.st_mode & 077) != 0) {
    status = KeyError(path, absl::StrFormat("mode 0%o lets other users read or change the "
                                            "cluster key: chmod 600 it",
                                            info.st_mode & 0777));
  } else if (info.st_size > kMaxKeyFileBytes) {
    status = KeyError(path, absl::StrCat(info.st_size, " bytes is not a key (at most ",
                                         kMaxKeyFileBytes, ")"));
  } else {
    key.resize(static_cast<size_t>(info.st_size));
    const ssize_t got = ::read(fd, key.data(), key.size());
    if (got != static_cast<ssize_t>(key.size())) status = KeyError(path, "short read");
  }
  ::close(fd);
  if (!status.ok()) return status;
  while (!key.empty() && absl::ascii_isspace(static_cast<unsigned char>(key.back()))) {
    key.pop_back();
  }
  if (key.size() < kMinClusterKeyBytes) {
    return KeyError(path, absl::StrCat("holds ", key.size(), " bytes; a key has at least ",
                                       kMinClusterKeyBytes, " (64 hex digits from "
                                       "`overlapd --make-cluster-key PATH`)"));
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
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return KeyError(path, absl::StrCat("cannot create (", std::strerror(errno), ")"));
  }
  const std::string text = key + "\n";
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!written || !synced) {
    ::unlink(path.c_str());
    return KeyError(path, "cannot write (disk full?)");
  }
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

std::string SignPeerCall(absl::string_view key, const PeerCallFacts& facts, absl::Time now) {
  unsigned char random[kNonceBytes];
  RAND_bytes(random, sizeof(random));
  const std::string nonce = Hex(random, sizeof(random));
  const std::string time_ms = absl::StrCat(absl::ToUnixMillis(now));
  return absl::StrCat(kTokenVersion, ":", time_ms, ":", nonce, ":",
                      Mac(key, facts, time_ms, nonce));
}

absl::Status VerifyPeerCall(absl::string_view key, const PeerCallFacts& facts,
                            absl::string_view token, absl::Time now) {
  if (token.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "the call carries no ", kAuthHeader, " token: this daemon takes peer calls only from "
        "daemons that hold its cluster key (peer_key_file)"));
  }
  const std::vector<absl::string_view> parts = absl::StrSplit(token, ':');
  int64_t time_ms = 0;
  if (parts.size() != 4 || parts[0] != kTokenVersion || !absl::SimpleAtoi(parts[1], &time_ms) ||
      parts[2].size() != 2 * kNonceBytes || parts[3].size() != 64) {
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
  const std::string expected = Mac(key, facts, parts[1], parts[2]);
  if (CRYPTO_memcmp(expected.data(), parts[3].data(), expected.size()) != 0) {
    return absl::UnauthenticatedError(absl::StrCat(
        "the call's token was not made with this daemon's cluster key for this call from ",
        facts.caller, ": the nodes' peer_key_file must hold the same key"));
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
