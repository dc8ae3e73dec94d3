// What the peer listener and the channels to peers share: the protocol's
// version header, the peer TLS settings, and the checks of the cluster keys
// of the config (common/config.h: peer_listen, peers, node_name, peer_tls_*).
//
// Peer addresses are HOST:PORT as listen_address.h reads them (localhost, an
// IPv4 address, [IPv6] or a host name), never unix:PATH. Plain TCP is allowed
// on loopback only; off loopback daemons speak mutual TLS (peer_tls_*).
#pragma once

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config.h"
#include "server/peer/node_keys.h"

namespace overlap::peer {

// Metadata key every peer call carries: the caller's OVERLAP_VERSION. A daemon
// refuses another version (or none) with FAILED_PRECONDITION.
inline constexpr char kVersionHeader[] = "overlapd-version";

// How often the peer TLS files are read again: a renewed certificate, key or
// CA is used from then on, without a restart (gRPC's file watcher).
inline constexpr unsigned int kPeerTlsReloadSeconds = 60;

struct PeerTls {
  std::string cert_file;  // peer_tls_cert
  std::string key_file;   // peer_tls_key
  std::string ca_file;    // peer_tls_ca
  unsigned int reload_s = kPeerTlsReloadSeconds;

  bool enabled() const { return !cert_file.empty() || !key_file.empty() || !ca_file.empty(); }
};

PeerTls PeerTlsOf(const DaemonConfig& config);

// The PEM texts of enabled peer TLS settings.
struct PeerTlsPem {
  std::string cert_chain;
  std::string private_key;
  std::string ca;
};
// INVALID_ARGUMENT naming the key when the three are not all set, or a file is
// unreadable or holds no PEM block of its kind. Call only when tls.enabled().
absl::StatusOr<PeerTlsPem> ReadPeerTls(const PeerTls& tls);

// Mutual-TLS credentials for the peer listener and for calls to peers, which
// follow the files as they change (every tls.reload_s). The files are read once
// here (ReadPeerTls's errors); one that later goes bad keeps the last good one.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> PeerServerCredentials(const PeerTls& tls);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> PeerChannelCredentials(
    const PeerTls& tls);

struct PeerAddress {
  std::string host;  // without brackets
  int port = 0;
  bool loopback = false;  // 127.0.0.0/8, localhost, [::1]
};
// `address` as HOST:PORT; INVALID_ARGUMENT "<key>: \"<address>\": <why>" when
// malformed or a unix: address, or with port 0 unless `allow_port_zero` (a
// listener may take any free port; a peer is called on a real one).
absl::StatusOr<PeerAddress> ParsePeerAddress(absl::string_view key, const std::string& address,
                                             bool allow_port_zero);

// The cluster key this daemon proves its peer calls with (peer_auth.h).
struct ClusterKey {
  std::string bytes;  // "" = none: peer TLS alone proves the calls
  std::string path;
  bool created = false;  // made now, at the default path
};
// peer_key_file's key; without it, STATE_DIR/cluster.key, made when missing
// unless peer TLS is set (where a key made on one node alone would lock it
// out of the others). INVALID_ARGUMENT naming peer_key_file for a key that
// cannot be used; config.state_dir must be set.
absl::StatusOr<ClusterKey> LoadClusterKey(const DaemonConfig& config);

// This daemon's node key (node_keys.h): peer_node_key_file's; without it,
// STATE_DIR/node.key, made when missing (a node key never leaves its node, so
// making one is always safe). INVALID_ARGUMENT naming peer_node_key_file for a
// key that cannot be used; config.state_dir must be set.
struct LoadedNodeKey {
  std::shared_ptr<const NodeKey> key;
  std::string path;
  bool created = false;  // made now
};
absl::StatusOr<LoadedNodeKey> LoadNodeKey(const DaemonConfig& config);

// peer_known_nodes_file's keys ({} when unset). INVALID_ARGUMENT naming
// peer_known_nodes_file when it cannot be read, or lists no key for one of
// config.peers; and when it is unset while peers are listed without peer TLS
// (the cluster key alone would not tell one node from another).
absl::StatusOr<KnownNodes> LoadKnownNodes(const DaemonConfig& config);

// Every check of the cluster keys, none of which needs the network: those of
// ValidateClusterKeys, the addresses of peer_listen, peers and node_name, the
// TLS files, TLS required when peer_listen or a peer is not loopback, and
// LoadKnownNodes's.
// INVALID_ARGUMENT naming the key. OK when peer_listen is "".
absl::Status ValidatePeerConfig(const DaemonConfig& config);

}  // namespace overlap::peer
