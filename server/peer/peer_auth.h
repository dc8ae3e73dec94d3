// How daemons prove to each other who they are on the peer port, whatever the
// network lets a local user reach (peer_server.h says who may call what).
//
// Every peer call names its caller (the metadata "overlapd-node": the caller's
// node name, as its peers list it) and proves it, by one or both of:
//   - the cluster key and the caller's node key: the cluster key is a secret
//     only the daemons hold (peer_key_file, mode 0600 or stricter, the same
//     bytes on every node, as munge.key is for Slurm); the node key is the
//     caller's own Ed25519 key (node_keys.h), whose public half the callee
//     lists (peer_known_nodes_file). The call carries "overlapd-auth": a time,
//     a nonce, the SHA-256 of the request's deterministic serialization, an
//     HMAC-SHA256 under the cluster key and an Ed25519 signature under the
//     node key of the method, caller, callee, time, nonce and that hash. A
//     local user who cannot read the key cannot make one; a node cannot sign
//     as another; a token is good for one call (the callee remembers its
//     nonce, nonce_cache.h), one callee and one request, within
//     kPeerAuthWindow. The callee answers with its own signature over the
//     caller's nonce, the method, its name, the status and the SHA-256 of its
//     response ("overlapd-callee-proof", trailing metadata), so that a process
//     that took a stopped peer's port is found out before it is sent a job.
//   - mutual TLS: the caller's certificate, signed by peer_tls_ca, must name
//     the node it claims (its subjectAltName holds the node's host, or its
//     common name is the host or HOST:PORT), so that one certified node
//     cannot speak as another.
// With TLS and no key, the certificate alone proves the caller; without TLS
// (loopback only) the key is required.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "server/peer/node_keys.h"

namespace overlap::peer {

// Metadata keys.
inline constexpr char kNodeHeader[] = "overlapd-node";
inline constexpr char kAuthHeader[] = "overlapd-auth";
inline constexpr char kCalleeProofHeader[] = "overlapd-callee-proof";

// How far a token's time may be from the callee's clock (either way).
inline constexpr absl::Duration kPeerAuthWindow = absl::Minutes(2);

// The shortest key taken, in bytes.
inline constexpr size_t kMinClusterKeyBytes = 16;

// The SHA-256 of `bytes`, 64 lower-case hex digits.
std::string Sha256Hex(absl::string_view bytes);

// The bytes of a secret file (a key) at `path`, trailing whitespace dropped:
// a regular file, no symlink, mode 0600 or 0400, at most 4 KiB.
// INVALID_ARGUMENT "<config_key>: <path>: why" otherwise (`what` names the
// secret in the advice: "cluster key"); NOT_FOUND when it does not exist.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path, absl::string_view config_key,
                                           absl::string_view what);
// Writes `text` to a new file `path`, mode 0600, failing when it exists.
absl::Status WriteSecretFile(const std::string& path, absl::string_view config_key,
                             absl::string_view text);

// The cluster key in `path`: its bytes, trailing whitespace dropped.
// INVALID_ARGUMENT naming peer_key_file when it cannot be read, is readable or
// writable by group or others (it must be 0600 or 0400), or is shorter than
// kMinClusterKeyBytes; NOT_FOUND when it does not exist.
absl::StatusOr<std::string> ReadClusterKey(const std::string& path);

// Writes a new random key (64 hex digits) to `path`, mode 0600, failing when
// the file exists. The key's bytes.
absl::StatusOr<std::string> CreateClusterKey(const std::string& path);

// The request's bytes as both ends see them: its deterministic serialization
// (the daemons run one version, so the callee's re-serialization matches).
std::string CanonicalBytes(const google::protobuf::Message& request);

// What one call is about, as both ends compute it.
struct PeerCallFacts {
  std::string method;  // "AdmitPart"
  std::string caller;  // the caller's node name
  std::string callee;  // the callee's node name
  std::string request_bytes;  // CanonicalBytes of the request
};

// The kAuthHeader value for `facts`, made at `now` with the cluster key `key`
// and, unless null, signed with the caller's `node_key`. `nonce`, unless null,
// receives the token's nonce (the callee's answer signs it).
std::string SignPeerCall(absl::string_view key, const PeerCallFacts& facts, absl::Time now,
                         const NodeKey* node_key = nullptr, std::string* nonce = nullptr);

// What a token proves once verified.
struct PeerToken {
  std::string nonce;         // 24 hex digits
  std::string request_hash;  // the SHA-256 (hex) of the request it was made for
  absl::Time time;
};

// Verifies `token` (a kAuthHeader value) for a call of `method` from `caller`
// to `callee` before the request is read: made with the cluster key `key`
// within kPeerAuthWindow of `now` and, unless `caller_public_key` is "",
// signed by that node key. The request the token was made for is the one it
// names (PeerToken::request_hash): the callee must check the request it reads
// against it. UNAUTHENTICATED saying what is wrong otherwise (no token,
// malformed, out of time, not made with this key, not signed by the caller).
absl::StatusOr<PeerToken> VerifyPeerToken(absl::string_view key,
                                          absl::string_view caller_public_key,
                                          absl::string_view method, absl::string_view caller,
                                          absl::string_view callee, absl::string_view token,
                                          absl::Time now);

// UNAUTHENTICATED unless `request_bytes` hash to what `token` names.
absl::Status CheckRequestMatchesToken(const PeerToken& token, absl::string_view request_bytes);

// VerifyPeerToken and CheckRequestMatchesToken for `facts`, with no node key.
absl::Status VerifyPeerCall(absl::string_view key, const PeerCallFacts& facts,
                            absl::string_view token, absl::Time now);

// What the callee's answer to one call is about, as both ends compute it.
struct PeerReplyFacts {
  std::string method;
  std::string caller;
  std::string callee;          // the node that answers
  std::string nonce;           // the caller's token's
  int code = 0;                // the answer's gRPC status code
  std::string response_bytes;  // CanonicalBytes of the response ("" on an error)
};

// The kCalleeProofHeader value: `facts` signed with the callee's node key.
std::string SignPeerReply(const NodeKey& callee_key, const PeerReplyFacts& facts);
// OK when `proof` is SignPeerReply's for `facts` under `callee_public_key`;
// UNAUTHENTICATED naming the callee otherwise.
absl::Status VerifyPeerReply(absl::string_view callee_public_key, const PeerReplyFacts& facts,
                             absl::string_view proof);

// What a caller's certificate says of it (gRPC's auth context properties).
struct PeerCertificate {
  std::string common_name;
  std::vector<std::string> subject_alt_names;  // DNS names and IP addresses
};

// OK when `certificate` names the node `node` (HOST:PORT): a
// subjectAltName equal to HOST, or a common name equal to HOST or to `node`.
// UNAUTHENTICATED otherwise.
absl::Status CheckCertificateNamesNode(const PeerCertificate& certificate,
                                       const std::string& node);

}  // namespace overlap::peer
