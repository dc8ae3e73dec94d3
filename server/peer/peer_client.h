// Calling peers: stubs on channels with the peer TLS settings, the context
// every call needs (version header, deadline), Hello, and whether an address
// is one of this daemon's peers.
//
// Thread safety: every function may be called from any thread; a stub may be
// shared between threads (gRPC stubs are thread-safe).
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/config.h"
#include "google/protobuf/message.h"
#include "overlap/v1/peer.grpc.pb.h"
#include "server/peer/node_keys.h"
#include "server/peer/peer_config.h"

namespace overlap::peer {

struct PeerChannelOptions {
  PeerTls tls;  // none: plain TCP, to loopback addresses only
  // The largest response taken (StoreGet's values).
  int max_message_bytes = 64 << 20;
};

// A stub for the peer at `address` (HOST:PORT). With TLS the channel presents
// tls's certificate and checks the peer's against tls's CA, and its name
// against the address's host (the peer's certificate must name it in its
// subjectAltName). INVALID_ARGUMENT naming "peer" for a malformed address,
// unusable TLS files, or a non-loopback address without TLS. Connects lazily:
// an unreachable peer shows in the first call (UNAVAILABLE).
absl::StatusOr<std::unique_ptr<v1::Peers::Stub>> NewPeerStub(const PeerChannelOptions& options,
                                                             const std::string& address);
// The channel NewPeerStub makes its stub on. It retries a lost connection
// within a second (gRPC's backoff would wait up to 2 minutes), so that a peer
// that restarted is reached again at once.
absl::StatusOr<std::shared_ptr<grpc::Channel>> NewPeerChannel(const PeerChannelOptions& options,
                                                              const std::string& address);

// Who this daemon is among its peers, as its calls prove it (peer_auth.h).
struct PeerIdentity {
  std::string node;         // its node name, as its peers list it
  std::string cluster_key;  // the key's bytes; "" = none (mutual TLS proves it)
  // Its node key, signing every token; null = tokens carry the cluster key's
  // proof only.
  std::shared_ptr<const NodeKey> node_key = nullptr;
  // The peers' public keys: with a cluster key, every answer from a peer
  // must carry its signature (CheckPeerReply); empty = answers not checked.
  KnownNodes known_nodes = {};
};

// Makes `context` a peer call's: the version header (kVersionHeader), who
// calls (kNodeHeader) with its proof (kAuthHeader, with a cluster key) for
// `method` with `request` to `callee`, and a deadline `timeout` from now.
// Call before the call starts. The token's nonce ("" without a cluster key),
// for CheckPeerReply.
std::string PreparePeerContext(grpc::ClientContext* context, absl::Duration timeout,
                               const PeerIdentity& self, absl::string_view method,
                               const std::string& callee, const google::protobuf::Message& request);

// Whether a finished call's answer came from `callee` itself: OK when the call
// failed (`status`; nothing of it is taken), when answers are not checked
// (no nonce, or self.known_nodes empty), or when its kCalleeProofHeader is
// the callee's signature over the nonce, `method`, the status and `response`
// under the key self.known_nodes lists for it. UNAUTHENTICATED naming the
// callee otherwise: a process that is not its daemon holds its port.
absl::Status CheckPeerReply(const grpc::ClientContext& context, const PeerIdentity& self,
                            absl::string_view method, const std::string& callee,
                            const std::string& nonce, const grpc::Status& status,
                            const google::protobuf::Message& response);

// Hello to the peer at `address` through `stub`, as `self`, its answer
// checked (CheckPeerReply). The call's status (its code, the message prefixed
// with the peer) on failure; FAILED_PRECONDITION naming the peer when it runs another
// version, or names itself other than `address` (its node_name must be the
// entry this daemon lists in peers).
absl::StatusOr<v1::HelloResponse> Hello(v1::Peers::StubInterface& stub, const std::string& address,
                                        const PeerIdentity& self, absl::Duration timeout);

// OK when `address` is listed in config.peers (as written there);
// PERMISSION_DENIED "node X is not in this daemon's peers: (a, b)" otherwise.
absl::Status CheckListedPeer(const DaemonConfig& config, const std::string& address);

}  // namespace overlap::peer
