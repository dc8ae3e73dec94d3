#include "server/rpc/rpc_server.h"

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/net/listen_address.h"
#include "server/net/unix_socket.h"
#include "server/rpc/node_sample_source.h"

namespace overlap::rpc {
namespace {

constexpr char kJobsServiceName[] = "overlap.v1.Jobs";

}  // namespace

absl::StatusOr<std::unique_ptr<RpcServer>> RpcServer::Start(const RpcServerOptions& options,
                                                            const RpcServerParts& parts) {
  auto log = GetLogger("rpc");
  absl::StatusOr<net::ListenTarget> target =
      ResolveListenWithTls(options.listen, options.allow_insecure_tcp, options.tls);
  if (!target.ok()) return target.status();
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      ServerCredentialsFor(options.tls);
  if (!credentials.ok()) return credentials.status();
  const bool on_unix_socket = !target->socket_path.empty();
  std::unique_ptr<RpcServer> server(new RpcServer());
  if (on_unix_socket) {
    RETURN_IF_ERROR(net::PrepareUnixSocketPath(target->socket_path));
    // Bound under the daemon's umask (0077): 0600 until it is opened below.
    ASSIGN_OR_RETURN(server->unix_, UnixListener::Bind(target->socket_path));
    server->socket_path_ = target->socket_path;
    RETURN_IF_ERROR(net::OpenUnixSocketToGroup(target->socket_path, options.socket_gid));
  } else if (target->insecure_network) {
    log->warn(
        "*** listening on {} {}: anyone who can reach this port can run and cancel jobs "
        "(allow_insecure_tcp is set) ***",
        target->grpc_uri,
        options.tls.enabled() ? "with TLS but no client certificates" : "without TLS");
  } else if (!options.tls.clients_authenticated()) {
    log->warn(
        "listening on {} without client certificates: every local user who connects is "
        "\"anonymous\", who may submit and read jobs and cancel anonymous ones; the unix socket "
        "knows each user",
        target->grpc_uri);
  }
  server->callers_ = std::make_unique<CallerResolver>(server->unix_.get(), options.admin_gid);
  node::DaemonCounters& counters = parts.node.counters();
  server->limiter_ = std::make_unique<net::RequestLimiter>(
      options.requests, "the user port", counters.requests_refused_busy,
      counters.requests_abandoned);
  server->jobs_service_ =
      std::make_unique<JobsService>(parts.queue, parts.admission, *server->callers_,
                                    options.jobs, counters, *server->limiter_);
  server->sampler_ = std::make_unique<NodeSampler>(
      [sample_parts = NodeSampleParts{parts.node, parts.queue, parts.sessions, parts.lanes}] {
        return TakeNodeSample(sample_parts);
      },
      options.node_sampler);
  server->node_service_ = std::make_unique<NodeService>(
      parts.node, parts.tuning, parts.engine, *server->callers_, parts.sessions, parts.lanes,
      server->sampler_.get(), &server->jobs_service_->watch_slots());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int selected_port = 0;
  // The unix socket's connections come from UnixListener (AddInsecureChannelFromFd).
  if (!on_unix_socket) builder.AddListeningPort(target->grpc_uri, *credentials, &selected_port);
  // gRPC's own limit on a request (4 MiB by default) would otherwise refuse a
  // spec that max_spec_bytes allows; twice it, so that a spec somewhat over
  // it still reaches the check that names the setting.
  const int64_t receive_limit = std::min<int64_t>(
      std::numeric_limits<int>::max(),
      std::max<int64_t>(4 << 20, 2 * options.max_spec_bytes + (64 << 10)));
  builder.SetMaxReceiveMessageSize(static_cast<int>(receive_limit));
  // Every call holds a thread while it runs: the limiter's calls, the
  // watchers, and room for the node's cheap reads and health checks. Past
  // it gRPC answers RESOURCE_EXHAUSTED itself rather than making threads
  // without end.
  grpc::ResourceQuota quota("overlapd-users");
  quota.SetMaxThreads(options.requests.max_total + options.jobs.max_watchers + 32);
  builder.SetResourceQuota(quota);
  builder.RegisterService(server->jobs_service_.get());
  builder.RegisterService(server->node_service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || (!on_unix_socket && selected_port == 0)) {
    server->server_.reset();
    return absl::FailedPreconditionError(absl::StrCat(
        "listen: cannot listen on ", target->grpc_uri,
        " (address in use, not permitted, or the host does not resolve",
        options.tls.enabled() ? "; or tls_cert and tls_key are not a matching pair" : "", ")"));
  }
  if (on_unix_socket) {
    server->listen_address_ = target->grpc_uri;
    server->unix_->Start(server->server_.get());
  } else {
    const size_t colon = target->grpc_uri.rfind(':');
    server->listen_address_ = absl::StrCat(target->grpc_uri.substr(0, colon), ":", selected_port);
  }
  parts.node.set_listen_address(server->listen_address_);
  server->SetServing(true);
  log->info("listening on {}{}", server->listen_address_,
            !options.tls.enabled()                ? ""
            : options.tls.clients_authenticated() ? " (TLS, client certificates required)"
                                                  : " (TLS)");
  return server;
}

RpcServer::~RpcServer() { Shutdown(absl::ZeroDuration()); }

void RpcServer::SetServing(bool serving) {
  if (server_ == nullptr) return;
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus("", serving);
  health->SetServingStatus(kJobsServiceName, serving);
}

void RpcServer::Shutdown(absl::Duration grace) {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    // Ends health Watch streams, which would otherwise hold Shutdown up.
    health->Shutdown();
  }
  if (unix_ != nullptr) unix_->Stop();  // no new connections
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
  if (!socket_path_.empty()) ::unlink(socket_path_.c_str());
  GetLogger("rpc")->info("gRPC server stopped");
}

}  // namespace overlap::rpc
