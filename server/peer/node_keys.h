// Each daemon's own identity on the peer port in key mode: an Ed25519 key pair
// whose private half stays on its node (peer_node_key_file, mode 0600; made by
// `overlapd --make-node-key PATH`, or at STATE_DIR/node.key when missing), and
// the public halves of the nodes it accepts (peer_known_nodes_file, one
// `NODE PUBLIC_KEY` a line, as ssh's known_hosts). The cluster key proves "a
// daemon of this cluster"; a node key proves which one, since no other node
// can derive it (peer_auth.h says what is signed).
//
// Thread safety: a NodeKey is immutable once made and may be shared.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

typedef struct evp_pkey_st EVP_PKEY;

namespace overlap::peer {

// A public key as written: "ed25519:" and 64 hex digits.
inline constexpr char kPublicKeyPrefix[] = "ed25519:";

class NodeKey {
 public:
  // The key whose 32-byte private seed is `seed`; INVALID_ARGUMENT otherwise.
  static absl::StatusOr<NodeKey> FromSeed(absl::string_view seed);
  // A new random key.
  static absl::StatusOr<NodeKey> Generate();

  // "ed25519:<64 hex digits>"
  const std::string& public_text() const { return public_text_; }
  // The Ed25519 signature of `message`, 128 hex digits.
  std::string Sign(absl::string_view message) const;
  // The private seed as the key file holds it: 64 hex digits.
  std::string SeedHex() const;

 private:
  NodeKey() = default;
  std::shared_ptr<EVP_PKEY> key_;
  std::string public_text_;
};

// OK when `signature` (128 hex digits) is the Ed25519 signature of `message`
// under `public_text` (kPublicKeyPrefix form); UNAUTHENTICATED otherwise.
absl::Status VerifyNodeSignature(absl::string_view public_text, absl::string_view message,
                                 absl::string_view signature);

// The node key at `path` (peer_node_key_file): 64 hex digits, under
// ReadSecretFile's rules. INVALID_ARGUMENT naming peer_node_key_file; NOT_FOUND
// when the file does not exist.
absl::StatusOr<NodeKey> ReadNodeKey(const std::string& path);
// Writes a new node key to `path`, mode 0600, failing when the file exists.
absl::StatusOr<NodeKey> CreateNodeKey(const std::string& path);

// Node name (HOST:PORT, as the peers list it) -> its public key text.
using KnownNodes = std::map<std::string, std::string>;

// The lines of a known-nodes file: `NODE PUBLIC_KEY`, blank lines and lines
// starting with '#' skipped. INVALID_ARGUMENT "peer_known_nodes_file: <path>:
// line N: why" for a malformed line, a bad key or a node listed twice.
absl::StatusOr<KnownNodes> ParseKnownNodes(absl::string_view text, absl::string_view path);
// The file at `path` (at most 1 MiB, not writable by others), parsed.
absl::StatusOr<KnownNodes> ReadKnownNodes(const std::string& path);

}  // namespace overlap::peer
