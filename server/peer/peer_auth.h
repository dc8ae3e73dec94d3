// How daemons prove to each other who they are on the peer port, whatever the
// network lets a local user reach (peer_server.h says who may call what).
//
// Every peer call names its caller (the metadata "overlapd-node": the caller's
// node name, as its peers list it) and proves it, by one or both of:
//   - the cluster key: a secret only the daemons hold (peer_key_file, mode
//     0600 or stricter, the same bytes on every node, as munge.key is for
//     Slurm). The call carries "overlapd-auth": a time, a nonce and an
//     HMAC-SHA256 under the key of the method, caller, callee, time, nonce and
//     the SHA-256 of the request's deterministic serialization. A local user
//     who cannot read the key cannot make one, nor reuse a token seen for
//     another call, callee or request, nor after kPeerAuthWindow.
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

namespace overlap::peer {

// Metadata keys.
inline constexpr char kNodeHeader[] = "overlapd-node";
inline constexpr char kAuthHeader[] = "overlapd-auth";

// How far a token's time may be from the callee's clock (either way).
inline constexpr absl::Duration kPeerAuthWindow = absl::Minutes(2);

// The shortest key taken, in bytes.
inline constexpr size_t kMinClusterKeyBytes = 16;

// The SHA-256 of `bytes`, 64 lower-case hex digits.
std::string Sha256Hex(absl::string_view bytes);

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

// The kAuthHeader value for `facts`, made at `now` with `key`.
std::string SignPeerCall(absl::string_view key, const PeerCallFacts& facts, absl::Time now);

// OK when `token` (a kAuthHeader value) was made with `key` for `facts`
// within kPeerAuthWindow of `now`; UNAUTHENTICATED saying what is wrong
// otherwise (no token, malformed, out of time, not made with this key).
absl::Status VerifyPeerCall(absl::string_view key, const PeerCallFacts& facts,
                            absl::string_view token, absl::Time now);

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
