// The check every call to the peer listener passes before gRPC reads its
// request: a grpc::AuthMetadataProcessor set on the listener's credentials,
// which sees the call's metadata only (the method from ":path"), so that a
// caller who cannot prove who it is never makes the daemon read, buffer or
// parse its body (a refused call's bytes stop at HTTP/2 flow control).
//
// It checks, in order: the version header (FAILED_PRECONDITION), the node the
// call names (kNodeHeader), the token (with a cluster key: peer_auth.h's
// VerifyPeerToken, signed by the caller's node key when known_nodes is set, a
// node not listed refused naming it), the token's nonce not seen before
// (NonceCache), and with TLS the certificate naming that node. A call that
// does not pass is refused with the code and message, and logged.
//
// gRPC 1.51 keeps the properties a processor adds on the connection's auth
// context, shared by all its calls, so nothing proven is handed to the handler
// that way: the handler runs Verify again on the call's own metadata (without
// taking the nonce a second time) and checks the request it read against the
// token.
//
// Thread safety: Process and Verify run on gRPC's threads, several at once.
#pragma once

#include <grpcpp/security/auth_metadata_processor.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/peer/node_keys.h"
#include "server/peer/nonce_cache.h"
#include "server/peer/peer_auth.h"

namespace overlap::peer {

// A call as the gate proved it.
struct ProvenCall {
  std::string node;                // the caller's node name
  std::optional<PeerToken> token;  // with a cluster key
};

// Live nonces remembered at most (NonceCache): far above what a cluster's
// coordinators send in kPeerAuthWindow, a few MiB at most.
inline constexpr size_t kMaxRememberedNonces = 1 << 16;

struct PeerGateOptions {
  bool tls = false;
  std::string cluster_key;  // "" = none: TLS alone proves the caller
  // With a cluster key: the node keys callers must sign with; empty = the
  // cluster key alone (it proves "a daemon of this cluster", not which).
  KnownNodes known_nodes;
  size_t max_nonces = kMaxRememberedNonces;
};

class PeerGate final : public grpc::AuthMetadataProcessor {
 public:
  explicit PeerGate(PeerGateOptions options)
      : options_(std::move(options)), nonces_(options_.max_nonces, kPeerAuthWindow) {}

  // The callee's own name, which tokens must be made for (set once bound).
  void set_node_name(const std::string& name);

  // Quick and CPU-only (an HMAC and an Ed25519 check): run on gRPC's thread.
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed, OutputMetadata* response) override;

  // Every check above of a call of `method` with `metadata` over a connection
  // whose auth context is `auth`; the nonce is taken (refused when seen
  // before) only when `take_nonce`.
  absl::StatusOr<ProvenCall> Verify(const InputMetadata& metadata, absl::string_view method,
                                    const grpc::AuthContext& auth, bool take_nonce);

 private:
  std::string node_name();

  const PeerGateOptions options_;
  NonceCache nonces_;
  absl::Mutex mu_;
  std::string node_name_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap::peer
