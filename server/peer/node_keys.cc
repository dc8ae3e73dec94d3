#include "server/peer/node_keys.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "server/peer/peer_auth.h"

namespace overlap::peer {
namespace {

constexpr size_t kSeedBytes = 32;
constexpr size_t kPublicKeyBytes = 32;
constexpr size_t kSignatureBytes = 64;
// A known-nodes file larger than this is not one (a line is ~100 bytes).
constexpr off_t kMaxKnownNodesBytes = 1 << 20;

std::string Hex(const unsigned char* data, size_t size) {
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(data), size));
}

// `hex` as bytes when it is exactly 2 * `size` hex digits.
bool FromHex(absl::string_view hex, size_t size, std::string* bytes) {
  if (hex.size() != 2 * size) return false;
  for (char c : hex) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  *bytes = absl::HexStringToBytes(hex);
  return bytes->size() == size;
}

std::shared_ptr<EVP_PKEY> Owned(EVP_PKEY* key) {
  return std::shared_ptr<EVP_PKEY>(key, [](EVP_PKEY* k) { EVP_PKEY_free(k); });
}

absl::StatusOr<std::string> PublicKeyBytes(absl::string_view public_text) {
  std::string raw;
  absl::string_view hex = public_text;
  if (!absl::ConsumePrefix(&hex, kPublicKeyPrefix) || !FromHex(hex, kPublicKeyBytes, &raw)) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a public key (expected ", kPublicKeyPrefix, " and 64 hex digits)"));
  }
  return raw;
}

absl::Status KnownNodesError(absl::string_view path, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("peer_known_nodes_file: ", path, ": ", why));
}

}  // namespace

absl::StatusOr<NodeKey> NodeKey::FromSeed(absl::string_view seed) {
  if (seed.size() != kSeedBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a node key's seed has ", kSeedBytes, " bytes"));
  }
  EVP_PKEY* raw = EVP_PKEY_new_raw_private_key(
      EVP_PKEY_ED25519, nullptr, reinterpret_cast<const unsigned char*>(seed.data()), seed.size());
  if (raw == nullptr) return absl::InvalidArgumentError("OpenSSL refused the node key");
  NodeKey key;
  key.key_ = Owned(raw);
  unsigned char public_key[kPublicKeyBytes];
  size_t size = sizeof(public_key);
  if (EVP_PKEY_get_raw_public_key(raw, public_key, &size) != 1 || size != kPublicKeyBytes) {
    return absl::InternalError("OpenSSL gave no public key for the node key");
  }
  key.public_text_ = absl::StrCat(kPublicKeyPrefix, Hex(public_key, size));
  return key;
}

absl::StatusOr<NodeKey> NodeKey::Generate() {
  unsigned char seed[kSeedBytes];
  if (RAND_bytes(seed, sizeof(seed)) != 1) {
    return absl::InternalError("no random bytes for a node key (OpenSSL's RAND_bytes)");
  }
  absl::StatusOr<NodeKey> key =
      FromSeed(absl::string_view(reinterpret_cast<const char*>(seed), sizeof(seed)));
  OPENSSL_cleanse(seed, sizeof(seed));
  return key;
}

std::string NodeKey::Sign(absl::string_view message) const {
  unsigned char signature[kSignatureBytes];
  size_t size = sizeof(signature);
  EVP_MD_CTX* context = EVP_MD_CTX_new();
  const bool signed_ok =
      context != nullptr &&
      EVP_DigestSignInit(context, nullptr, nullptr, nullptr, key_.get()) == 1 &&
      EVP_DigestSign(context, signature, &size,
                     reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
  EVP_MD_CTX_free(context);
  // A signature that could not be made is one no verifier takes.
  return signed_ok ? Hex(signature, size) : std::string(2 * kSignatureBytes, '0');
}

std::string NodeKey::SeedHex() const {
  unsigned char seed[kSeedBytes];
  size_t size = sizeof(seed);
  if (EVP_PKEY_get_raw_private_key(key_.get(), seed, &size) != 1) return "";
  std::string hex = Hex(seed, size);
  OPENSSL_cleanse(seed, sizeof(seed));
  return hex;
}

absl::Status VerifyNodeSignature(absl::string_view public_text, absl::string_view message,
                                 absl::string_view signature) {
  absl::StatusOr<std::string> public_key = PublicKeyBytes(public_text);
  std::string signature_bytes;
  if (!public_key.ok() || !FromHex(signature, kSignatureBytes, &signature_bytes)) {
    return absl::UnauthenticatedError("malformed node key signature");
  }
  std::shared_ptr<EVP_PKEY> key = Owned(EVP_PKEY_new_raw_public_key(
      EVP_PKEY_ED25519, nullptr, reinterpret_cast<const unsigned char*>(public_key->data()),
      public_key->size()));
  EVP_MD_CTX* context = EVP_MD_CTX_new();
  const bool verified =
      key != nullptr && context != nullptr &&
      EVP_DigestVerifyInit(context, nullptr, nullptr, nullptr, key.get()) == 1 &&
      EVP_DigestVerify(context, reinterpret_cast<const unsigned char*>(signature_bytes.data()),
                       signature_bytes.size(),
                       reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
  EVP_MD_CTX_free(context);
  if (verified) return absl::OkStatus();
  return absl::UnauthenticatedError("the node key signature does not verify");
}

absl::StatusOr<NodeKey> ReadNodeKey(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string hex, ReadSecretFile(path, "peer_node_key_file", "node key"));
  std::string seed;
  if (!FromHex(hex, kSeedBytes, &seed)) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer_node_key_file: ", path,
                     ": not a node key (64 hex digits from `overlapd --make-node-key PATH`)"));
  }
  absl::StatusOr<NodeKey> key = NodeKey::FromSeed(seed);
  OPENSSL_cleanse(seed.data(), seed.size());
  return key;
}

absl::StatusOr<NodeKey> CreateNodeKey(const std::string& path) {
  ASSIGN_OR_RETURN(NodeKey key, NodeKey::Generate());
  std::string text = key.SeedHex() + "\n";
  const absl::Status written = WriteSecretFile(path, "peer_node_key_file", text);
  OPENSSL_cleanse(text.data(), text.size());
  RETURN_IF_ERROR(written);
  return key;
}

absl::StatusOr<KnownNodes> ParseKnownNodes(absl::string_view text, absl::string_view path) {
  KnownNodes nodes;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() != 2) {
      return KnownNodesError(path, absl::StrCat("line ", line_number,
                                                ": expected NODE PUBLIC_KEY (HOST:PORT and the "
                                                "line `overlapd --make-node-key` printed)"));
    }
    if (!PublicKeyBytes(fields[1]).ok()) {
      return KnownNodesError(
          path,
          absl::StrCat("line ", line_number, ": ", absl::CHexEscape(fields[1].substr(0, 80)),
                       " is not a public key (expected ", kPublicKeyPrefix, " and 64 hex digits)"));
    }
    if (!nodes.emplace(std::string(fields[0]), std::string(fields[1])).second) {
      return KnownNodesError(
          path, absl::StrCat("line ", line_number, ": node ",
                             absl::CHexEscape(fields[0].substr(0, 80)), " is listed twice"));
    }
  }
  return nodes;
}

absl::StatusOr<KnownNodes> ReadKnownNodes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return KnownNodesError(path, absl::StrCat("cannot open (", std::strerror(errno), ")"));
  }
  struct stat info {};
  std::string text;
  absl::Status status;
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    status = KnownNodesError(path, "not a regular file");
  } else if ((info.st_mode & 022) != 0) {
    // Whoever may write it may add a node of their own.
    status = KnownNodesError(path, "group or others may write it, and so add a node: chmod 644 it");
  } else if (info.st_size > kMaxKnownNodesBytes) {
    status = KnownNodesError(
        path, absl::StrCat(info.st_size, " bytes (at most ", kMaxKnownNodesBytes, ")"));
  } else {
    text.resize(static_cast<size_t>(info.st_size));
    if (::read(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      status = KnownNodesError(path, "short read");
    }
  }
  ::close(fd);
  RETURN_IF_ERROR(status);
  return ParseKnownNodes(text, path);
}

}  // namespace overlap::peer
