#include "server/peer/peer_server.h"

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/server_context.h>

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/rpc/status_util.h"

namespace overlap::peer {
namespace {

// The most of a caller's version header quoted back.
constexpr size_t kMaxQuotedVersion = 64;

absl::Status CheckVersion(const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find(kVersionHeader);
  if (it == metadata.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the caller sent no ", kVersionHeader,
                     " header (not overlapd, or an overlapd older than "
                     "the peer protocol); this daemon runs overlapd ",
                     OVERLAP_VERSION, ": daemons of a cluster must run one version"));
  }
  const absl::string_view version(it->second.data(),
                                  std::min(it->second.size(), kMaxQuotedVersion));
  if (it->second.size() == version.size() && version == OVERLAP_VERSION) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("peer runs overlapd ",
                                                    absl::CHexEscape(version), ", this daemon ",
                                                    OVERLAP_VERSION, ": upgrade them together"));
}

PeerCaller CallerOf(const grpc::ServerContext& context) {
  PeerCaller caller;
  caller.peer_uri = context.peer();
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return caller;
  // The subject, else the common name (as rpc/caller.cc reads a user's certificate).
  for (const char* property : {"x509_subject", "x509_common_name"}) {
    for (const grpc::string_ref& value : auth->FindPropertyValues(property)) {
      if (value.size() > 0 && caller.tls_subject.empty()) {
        caller.tls_subject.assign(value.data(), value.size());
      }
    }
  }
  return caller;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> CredentialsFor(const PeerTls& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  ASSIGN_OR_RETURN(PeerTlsPem pem, ReadPeerTls(tls));
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = std::move(pem.ca);
  options.pem_key_cert_pairs.push_back({std::move(pem.private_key), std::move(pem.cert_chain)});
  return grpc::SslServerCredentials(options);
}

}  // namespace

class PeerServer::Service final : public v1::Peers::Service {
 public:
  Service(PeerHandler* handler, PeerHello hello) : handler_(handler), hello_(std::move(hello)) {}

  void set_node_name(const std::string& name) {
    absl::MutexLock lock(&mu_);
    hello_.node_name = name;
  }

  grpc::Status Hello(grpc::ServerContext* context, const v1::HelloRequest* request,
                     v1::HelloResponse* response) override {
    if (absl::Status s = Admit(*context, "Hello"); !s.ok()) return rpc::ToGrpcStatus(s);
    GetLogger("peer")->debug("Hello from {} ({})", request->node(), context->peer());
    absl::MutexLock lock(&mu_);
    response->set_version(OVERLAP_VERSION);
    response->set_backend(hello_.backend);
    response->set_device_count(hello_.device_count);
    response->set_node(hello_.node_name);
    return grpc::Status::OK;
  }

  grpc::Status AdmitPart(grpc::ServerContext* context, const v1::AdmitPartRequest* request,
                         v1::AdmitPartResponse* response) override {
    return Serve(*context, "AdmitPart", [&](const PeerCaller& caller) -> absl::Status {
      ASSIGN_OR_RETURN(*response, handler_->AdmitPart(caller, *request));
      return absl::OkStatus();
    });
  }

  grpc::Status CancelPart(grpc::ServerContext* context, const v1::CancelPartRequest* request,
                          v1::CancelPartResponse*) override {
    return Serve(*context, "CancelPart",
                 [&](const PeerCaller& caller) { return handler_->CancelPart(caller, *request); });
  }

  grpc::Status HoldPart(grpc::ServerContext* context, const v1::HoldPartRequest* request,
                        v1::HoldPartResponse* response) override {
    return Serve(*context, "HoldPart", [&](const PeerCaller& caller) -> absl::Status {
      ASSIGN_OR_RETURN(*response, handler_->HoldPart(caller, *request));
      return absl::OkStatus();
    });
  }

  grpc::Status ReportPart(grpc::ServerContext* context, const v1::ReportPartRequest* request,
                          v1::ReportPartResponse*) override {
    return Serve(*context, "ReportPart",
                 [&](const PeerCaller& caller) { return handler_->ReportPart(caller, *request); });
  }

  grpc::Status StoreSet(grpc::ServerContext* context, const v1::StoreSetRequest* request,
                        v1::StoreSetResponse*) override {
    return Serve(*context, "StoreSet",
                 [&](const PeerCaller& caller) { return handler_->StoreSet(caller, *request); });
  }

  grpc::Status StoreGet(grpc::ServerContext* context, const v1::StoreGetRequest* request,
                        v1::StoreGetResponse* response) override {
    return Serve(*context, "StoreGet", [&](const PeerCaller& caller) -> absl::Status {
      ASSIGN_OR_RETURN(*response->mutable_value(), handler_->StoreGet(caller, *request));
      return absl::OkStatus();
    });
  }

 private:
  // The version check, logged when it refuses: a cluster of mixed versions is
  // the operator's to fix, and the caller may not show the message to anyone.
  static absl::Status Admit(const grpc::ServerContext& context, absl::string_view method) {
    absl::Status status = CheckVersion(context);
    if (!status.ok()) {
      GetLogger("peer")->warn("refused {} from {}: {}", std::string(method), context.peer(),
                              std::string(status.message()));
    }
    return status;
  }

  template <typename Fn>
  grpc::Status Serve(const grpc::ServerContext& context, absl::string_view method, Fn&& fn) {
    if (absl::Status s = Admit(context, method); !s.ok()) return rpc::ToGrpcStatus(s);
    if (handler_ == nullptr) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "this daemon runs no cluster jobs");
    }
    return rpc::ToGrpcStatus(fn(CallerOf(context)));
  }

  PeerHandler* const handler_;
  absl::Mutex mu_;
  PeerHello hello_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<PeerServer>> PeerServer::Start(const PeerServerOptions& options,
                                                              PeerHandler* handler,
                                                              PeerHello hello) {
  ASSIGN_OR_RETURN(const PeerAddress address,
                   ParsePeerAddress("peer_listen", options.listen, /*allow_port_zero=*/true));
  if (!options.tls.enabled() && !address.loopback) {
    return absl::InvalidArgumentError(absl::StrCat(
        "peer_listen: \"", options.listen,
        "\": not a loopback address: daemons off loopback speak mutual TLS; set peer_tls_cert, "
        "peer_tls_key and peer_tls_ca"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   CredentialsFor(options.tls));

  std::unique_ptr<PeerServer> server(new PeerServer());
  const std::string node_name = hello.node_name;
  server->service_ = std::make_unique<Service>(handler, std::move(hello));
  server->tls_ = options.tls.enabled();
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default, under which a second daemon on the same
  // port would bind too and take half the calls; refuse it instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  int selected_port = 0;
  builder.AddListeningPort(options.listen, credentials, &selected_port);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || selected_port == 0) {
    server->server_.reset();
    return absl::FailedPreconditionError(absl::StrCat(
        "peer_listen: cannot listen on ", options.listen,
        " (address in use, not permitted, or the host does not resolve",
        server->tls_ ? "; or peer_tls_cert and peer_tls_key are not a matching pair" : "", ")"));
  }
  server->listen_address_ =
      absl::StrCat(options.listen.substr(0, options.listen.rfind(':')), ":", selected_port);
  server->node_name_ = node_name.empty() ? server->listen_address_ : node_name;
  server->service_->set_node_name(server->node_name_);
  return server;
}

PeerServer::~PeerServer() { Shutdown(absl::ZeroDuration()); }

void PeerServer::Shutdown(absl::Duration grace) {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    // Present when the daemon enabled gRPC's default health service for its
    // own server; its Watch streams would hold Shutdown up.
    health->Shutdown();
  }
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
  GetLogger("peer")->info("peer listener stopped");
}

}  // namespace overlap::peer
