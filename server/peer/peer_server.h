// The peer listener: the gRPC port daemons speak to each other on about jobs
// that span them (overlap.v1.Peers, proto/overlap/v1/peer.proto), beside the
// port users keep. It owns the transport and its rules; the job logic sits
// behind PeerHandler (part_calls.h).
//
// Rules every call meets before its request is read (peer_gate.h):
//   - the metadata "overlapd-version" (peer_config.h) equals this daemon's
//     OVERLAP_VERSION, else FAILED_PRECONDITION saying both versions;
//   - with peer TLS, the caller presented a certificate signed by peer_tls_ca
//     (the handshake refuses anyone else) that names the node the call says
//     it comes from; with a cluster key, the call carries a token made with
//     it for this very call, never used before, and signed by the caller's
//     node key where known_nodes lists them (peer_auth.h). Else
//     UNAUTHENTICATED, logged. The listener starts only with one or both.
// Once read, the request must be the one the token was made for. The handler
// then sees the caller as proven (PeerCaller::node), never as a message says,
// and decides what that node may do. Hello is answered by the listener itself.
// With a node key, every answer to a call with a token carries the callee's
// signature (kCalleeProofHeader, trailing metadata).
//
// Thread safety: handler methods run on gRPC's threads, several at once.
// listen_address and node_name from any thread; Shutdown once, from one.
#pragma once

#include <grpcpp/server.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "overlap/v1/peer.grpc.pb.h"
#include "server/net/request_limiter.h"
#include "server/node/node_state.h"
#include "server/peer/node_keys.h"
#include "server/peer/part_calls.h"
#include "server/peer/peer_config.h"
#include "server/peer/peer_gate.h"

namespace overlap::peer {

struct PeerServerOptions {
  std::string listen;  // peer_listen: HOST:PORT; port 0 takes any free port
  PeerTls tls;         // required off loopback
  // The cluster key's bytes (peer_auth.h); "" = none, when TLS alone proves
  // callers. Required without TLS.
  std::string cluster_key;
  // This daemon's node key, signing its answers; null = answers unsigned.
  std::shared_ptr<const NodeKey> node_key;
  // With a cluster key: the node keys callers must sign with (node_keys.h);
  // empty = the cluster key alone proves a caller.
  KnownNodes known_nodes;
  // The largest request taken (AdmitPart's spec, ReportPart's result).
  int max_message_bytes = 64 << 20;
  // Calls in flight at once, in all and per calling node; long polls
  // (HoldPart, StoreGet) count while they wait.
  net::RequestLimits requests;
  // Where refused and abandoned calls are counted; null = not exported.
  node::DaemonCounters* counters = nullptr;
};

// What Hello answers, beside the version (always OVERLAP_VERSION).
struct PeerHello {
  std::string backend;  // "host" | "cuda"
  int device_count = 0;
  std::string node_name;  // "" = the bound listen address
};

class PeerServer {
 public:
  // Listening when this returns. `handler` may be null: the job calls are then
  // UNAVAILABLE "this daemon runs no cluster jobs"; else it must outlive the
  // server. INVALID_ARGUMENT for a bad address or TLS settings (TLS missing
  // off loopback, neither TLS nor a cluster key), FAILED_PRECONDITION when the
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<PeerServer>> Start(const PeerServerOptions& options,
                                                           PeerHandler* handler, PeerHello hello);
  ~PeerServer();  // Shutdown(0)
  PeerServer(const PeerServer&) = delete;
  PeerServer& operator=(const PeerServer&) = delete;

  // The bound address ("127.0.0.1:41234").
  const std::string& listen_address() const { return listen_address_; }
  // The name Hello answers with: the hello's node_name, else listen_address().
  const std::string& node_name() const { return node_name_; }
  bool tls() const { return tls_; }
  // Stops taking calls; calls still running after `grace` are cancelled. Blocks
  // until every handler returned.
  void Shutdown(absl::Duration grace);

 private:
  class Service;
  PeerServer() = default;

  std::shared_ptr<PeerGate> gate_;
  node::DaemonCounters own_counters_;  // when the options give none
  std::unique_ptr<net::RequestLimiter> limiter_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string listen_address_;
  std::string node_name_;
  bool tls_ = false;
  bool shut_down_ = false;
};

}  // namespace overlap::peer
