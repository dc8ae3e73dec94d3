#include "server/rpc/rpc_server.h"

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "server/rpc/listen_address.h"

namespace overlap::rpc {
namespace {

constexpr char kJobsServiceName[] = "overlap.v1.Jobs";

}  // namespace

absl::StatusOr<std::unique_ptr<RpcServer>> RpcServer::Start(const RpcServerOptions& options,
                                                            const RpcServerParts& parts) {
  auto log = GetLogger("rpc");
  absl::StatusOr<ListenTarget> target =
      ResolveListenWithTls(options.listen, options.allow_insecure_tcp, options.tls);
  if (!target.ok()) return target.status();
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      ServerCredentialsFor(options.tls);
  if (!credentials.ok()) return credentials.status();
  if (!target->socket_path.empty()) {
    if (absl::Status s = PrepareUnixSocketPath(target->socket_path); !s.ok()) return s;
  }
  if (target->insecure_network) {
    log->warn(
        "*** listening on {} {}: anyone who can reach this port can run and cancel jobs "
        "(allow_insecure_tcp is set) ***",
        target->grpc_uri,
        options.tls.enabled() ? "with TLS but no client certificates" : "without TLS");
  }

  std::unique_ptr<RpcServer> server(new RpcServer());
  server->jobs_service_ = std::make_unique<JobsService>(parts.scheduler, parts.admission,
                                                       options.jobs, parts.node.counters());
  server->node_service_ = std::make_unique<NodeService>(parts.node, parts.tuning, parts.engine);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int selected_port = 0;
  builder.AddListeningPort(target->grpc_uri, *credentials, &selected_port);
  // gRPC's own limit on a request (4 MiB by default) would otherwise refuse a
  // spec that max_spec_bytes allows; twice it, so that a spec somewhat over
  // it still reaches the check that names the setting.
  const int64_t receive_limit = std::min<int64_t>(
      std::numeric_limits<int>::max(),
      std::max<int64_t>(4 << 20, 2 * options.max_spec_bytes + (64 << 10)));
  builder.SetMaxReceiveMessageSize(static_cast<int>(receive_limit));
  builder.RegisterService(server->jobs_service_.get());
  builder.RegisterService(server->node_service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || selected_port == 0) {
    server->server_.reset();
    return absl::FailedPreconditionError(absl::StrCat(
        "listen: cannot listen on ", target->grpc_uri,
        " (address in use, not permitted, or the host does not resolve",
        options.tls.enabled() ? "; or tls_cert and tls_key are not a matching pair" : "", ")"));
  }
  if (!target->socket_path.empty()) {
    server->socket_path_ = target->socket_path;
    server->listen_address_ = target->grpc_uri;
    // Group members may talk to the daemon; others may not. The socket was
    // bound under the daemon's umask (0077), so this only ever widens it.
    if (options.socket_gid >= 0 &&
        ::chown(target->socket_path.c_str(), static_cast<uid_t>(-1),
                static_cast<gid_t>(options.socket_gid)) != 0) {
      const int error = errno;
      server->Shutdown(absl::ZeroDuration());
      return absl::InvalidArgumentError(absl::StrCat(
          "socket_group: cannot give ", target->socket_path, " to group ", options.socket_gid,
          ": ", std::strerror(error), " (overlapd must run as root or be a member of it)"));
    }
    if (::chmod(target->socket_path.c_str(), 0660) != 0) {
      log->warn("cannot chmod 0660 {}: {}", target->socket_path, std::strerror(errno));
    }
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
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
  if (!socket_path_.empty()) ::unlink(socket_path_.c_str());
  GetLogger("rpc")->info("gRPC server stopped");
}

}  // namespace overlap::rpc
