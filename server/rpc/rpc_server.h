// The gRPC server of overlapd: the Jobs and Node services and the standard
// grpc.health.v1 service (SERVING for "" and "overlap.v1.Jobs" while the daemon
// takes work), listening on one unix socket (mode 0660, optionally to a chosen
// group) or TCP port (loopback,
// or the network with mutual TLS: server_tls.h).
//
// Thread safety: SetServing and listen_address may be called from any thread;
// Shutdown once, from one thread.
#pragma once

#include <grpcpp/server.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/engine/engine.h"
#include "server/jobs/admission.h"
#include "server/jobs/job_queue.h"
#include "server/net/request_limiter.h"
#include "server/node/node_state.h"
#include "server/node/tuning_state.h"
#include "server/rpc/caller.h"
#include "server/rpc/jobs_service.h"
#include "server/rpc/node_sampler.h"
#include "server/rpc/node_service.h"
#include "server/rpc/server_tls.h"
#include "server/rpc/unix_listener.h"

namespace overlap::rpc {

struct RpcServerOptions {
  std::string listen;  // see listen_address.h
  bool allow_insecure_tcp = false;
  // A unix socket is made 0600 (the daemon's umask) and then given mode 0660,
  // with this group when >= 0 (config socket_group).
  int socket_gid = -1;
  // Members of this group are admins (caller.h); -1: only root.
  int admin_gid = -1;
  ServerTls tls;  // TCP only
  JobsServiceOptions jobs;
  // The largest request gRPC takes: max_spec_bytes, with room (rpc_server.cc).
  int64_t max_spec_bytes = 1 << 20;
  // Jobs calls in flight at once, in all and per user (request_limiter.h);
  // gRPC's threads are capped at these plus the watchers.
  net::RequestLimits requests;
  // Node.WatchNode's sampler: its base interval (the streams' floor) and when
  // it drops a reader that fell behind (node_sampler.h).
  NodeSamplerOptions node_sampler;
};

// What the services serve from; every part must outlive the server.
struct RpcServerParts {
  jobs::JobQueue& queue;
  const jobs::Admission& admission;
  node::NodeState& node;
  node::TuningState& tuning;
  const engine::Engine& engine;
  // Null where the daemon runs no sessions (session_socket off, no shared memory).
  sessions::SessionRegistry* sessions = nullptr;
  const sessions::SessionLanes* lanes = nullptr;
};

class RpcServer {
 public:
  // Listening when this returns. INVALID_ARGUMENT for a bad listen address, TLS
  // settings or socket group, FAILED_PRECONDITION when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<RpcServer>> Start(const RpcServerOptions& options,
                                                          const RpcServerParts& parts);
  ~RpcServer();  // Shutdown(0)
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  // The bound address ("unix:/run/overlapd/overlapd.sock", "127.0.0.1:41234").
  const std::string& listen_address() const { return listen_address_; }
  // What Node.WatchNode's sampler has done: streams open, samples taken,
  // skipped and readers dropped.
  NodeSamplerCounters node_stream_counters() const { return sampler_->counters(); }
  // The sampler's latest sample (taken now where it is stale): what the
  // metrics read, so that they and the streams agree.
  std::shared_ptr<const v1::NodeSample> LatestNodeSample() { return sampler_->Latest(); }
  // Health of "" and "overlap.v1.Jobs".
  void SetServing(bool serving);
  // Stops accepting calls; calls still running after `grace` are cancelled. Blocks
  // until every handler returned. Removes the unix socket file.
  void Shutdown(absl::Duration grace);

 private:
  RpcServer() = default;

  std::unique_ptr<UnixListener> unix_;  // on a unix socket
  std::unique_ptr<CallerResolver> callers_;
  std::unique_ptr<net::RequestLimiter> limiter_;
  std::unique_ptr<NodeSampler> sampler_;  // outlives the services' streams
  std::unique_ptr<JobsService> jobs_service_;
  std::unique_ptr<NodeService> node_service_;
  std::unique_ptr<grpc::Server> server_;
  std::string listen_address_;
  std::string socket_path_;
  bool shut_down_ = false;
};

}  // namespace overlap::rpc
