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
#include "server/peer/peer_auth.h"
#include "server/net/status_util.h"

namespace overlap::peer {
namespace {

// The most of a caller's version header quoted back.
constexpr size_t kMaxQuotedVersion = 64;

// A caller names itself in at most this many bytes.
constexpr size_t kMaxNodeNameBytes = 256;

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

// The metadata value under `key`, "" when absent.
std::string Header(const grpc::ServerContext& context, const char* key) {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find(key);
  return it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
}

// The first value of an auth context property, "" when absent.
std::string Property(const grpc::AuthContext& auth, const char* name) {
  for (const grpc::string_ref& value : auth.FindPropertyValues(name)) {
    if (value.size() > 0) return std::string(value.data(), value.size());
  }
  return "";
}

// The certificate's names, where the call came over mutual TLS.
PeerCertificate CertificateOf(const grpc::AuthContext& auth) {
  PeerCertificate certificate;
  certificate.common_name = Property(auth, "x509_common_name");
  for (const grpc::string_ref& value : auth.FindPropertyValues("x509_subject_alternative_name")) {
    certificate.subject_alt_names.emplace_back(value.data(), value.size());
  }
  return certificate;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> CredentialsFor(const PeerTls& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  return PeerServerCredentials(tls);
}

}  // namespace

class PeerServer::Service final : public v1::Peers::Service {
 public:
  Service(PeerHandler* handler, PeerHello hello, bool tls, std::string cluster_key,
          net::RequestLimiter& limiter)
      : handler_(handler),
        limiter_(limiter),
        tls_(tls),
        cluster_key_(std::move(cluster_key)),
        hello_(std::move(hello)) {}

  void set_node_name(const std::string& name) {
    absl::MutexLock lock(&mu_);
    hello_.node_name = name;
  }

  grpc::Status Hello(grpc::ServerContext* context, const v1::HelloRequest* request,
                     v1::HelloResponse* response) override {
    absl::StatusOr<PeerCaller> caller = Admit(*context, "Hello", *request);
    if (!caller.ok()) return net::ToGrpcStatus(caller.status());
    GetLogger("peer")->debug("Hello from {} ({})", caller->node, context->peer());
    absl::MutexLock lock(&mu_);
    response->set_version(OVERLAP_VERSION);
    response->set_backend(hello_.backend);
    response->set_device_count(hello_.device_count);
    response->set_node(hello_.node_name);
    return grpc::Status::OK;
  }

  grpc::Status AdmitPart(grpc::ServerContext* context, const v1::AdmitPartRequest* request,
                         v1::AdmitPartResponse* response) override {
    return Serve(*context, "AdmitPart", *request, [&](const PeerCaller& caller) -> absl::Status {
      ASSIGN_OR_RETURN(*response, handler_->AdmitPart(caller, *request));
      return absl::OkStatus();
    });
  }

  grpc::Status CancelPart(grpc::ServerContext* context, const v1::CancelPartRequest* request,
                          v1::CancelPartResponse*) override {
    return Serve(*context, "CancelPart", *request,
                 [&](const PeerCaller& caller) { return handler_->CancelPart(caller, *request); });
  }

  grpc::Status HoldPart(grpc::ServerContext* context, const v1::HoldPartRequest* request,
                        v1::HoldPartResponse* response) override {
    return Serve(*context, "HoldPart", *request, [&](const PeerCaller& caller) -> absl::Status {
      ASSIGN_OR_RETURN(*response, handler_->HoldPart(caller, *request));
      return absl::OkStatus();
    });
  }

  grpc::Status ReportPart(grpc::ServerContext* context, const v1::ReportPartRequest* request,
                          v1::ReportPartResponse*) override {
    return Serve(*context, "ReportPart", *request,
                 [&](const PeerCaller& caller) { return handler_->ReportPart(caller, *request); });
  }

  grpc::Status StoreSet(grpc::ServerContext* context, const v1::StoreSetRequest* request,
                        v1::StoreSetResponse*) override {
    return Serve(*context, "StoreSet", *request,
                 [&](const PeerCaller& caller) { return handler_->StoreSet(caller, *request); });
  }

  grpc::Status StoreGet(grpc::ServerContext* context, const v1::StoreGetRequest* request,
                        v1::StoreGetResponse* response) override {
    return Serve(*context, "StoreGet", *request, [&](const PeerCaller& caller) -> absl::Status {
      ASSIGN_OR_RETURN(*response->mutable_value(), handler_->StoreGet(caller, *request));
      return absl::OkStatus();
    });
  }

 private:
  // The version check and the caller's proof of who it is (peer_auth.h):
  // the caller as proven, or why not, logged, since the caller may not show
  // the message to anyone: a cluster of mixed versions or keys is the
  // operator's to fix, and a refused stranger is worth knowing of.
  absl::StatusOr<PeerCaller> Admit(const grpc::ServerContext& context, absl::string_view method,
                                   const google::protobuf::Message& request) {
    const absl::Status version = CheckVersion(context);
    absl::StatusOr<PeerCaller> caller =
        version.ok() ? Authenticate(context, method, request) : absl::StatusOr<PeerCaller>(version);
    if (!caller.ok()) {
      GetLogger("peer")->warn("refused {} from {}: {}", std::string(method), context.peer(),
                              std::string(caller.status().message()));
    }
    return caller;
  }

  absl::StatusOr<PeerCaller> Authenticate(const grpc::ServerContext& context,
                                          absl::string_view method,
                                          const google::protobuf::Message& request) {
    PeerCaller caller;
    caller.peer_uri = context.peer();
    caller.node = Header(context, kNodeHeader);
    if (caller.node.empty() || caller.node.size() > kMaxNodeNameBytes ||
        !ParsePeerAddress("caller", caller.node, /*allow_port_zero=*/false).ok()) {
      return absl::UnauthenticatedError(absl::StrCat(
          "the call names no caller as HOST:PORT in its ", kNodeHeader, " header"));
    }
    if (!cluster_key_.empty()) {
      PeerCallFacts facts{std::string(method), caller.node, node_name(), CanonicalBytes(request)};
      RETURN_IF_ERROR(
          VerifyPeerCall(cluster_key_, facts, Header(context, kAuthHeader), absl::Now()));
    }
    if (tls_) {
      std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
      if (auth == nullptr || !auth->IsPeerAuthenticated()) {
        return absl::UnauthenticatedError("the call came without a client certificate");
      }
      caller.tls_subject = Property(*auth, "x509_subject");
      if (caller.tls_subject.empty()) caller.tls_subject = Property(*auth, "x509_common_name");
      RETURN_IF_ERROR(CheckCertificateNamesNode(CertificateOf(*auth), caller.node));
    }
    return caller;
  }

  std::string node_name() {
    absl::MutexLock lock(&mu_);
    return hello_.node_name;
  }

  template <typename Fn>
  grpc::Status Serve(const grpc::ServerContext& context, absl::string_view method,
                     const google::protobuf::Message& request, Fn&& fn) {
    absl::StatusOr<PeerCaller> caller = Admit(context, method, request);
    if (!caller.ok()) return net::ToGrpcStatus(caller.status());
    if (handler_ == nullptr) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "this daemon runs no cluster jobs");
    }
    absl::StatusOr<net::RequestLimiter::Ticket> ticket = limiter_.Enter(caller->node);
    if (!ticket.ok()) return net::ToGrpcStatus(ticket.status());
    const absl::Time started = absl::Now();
    const absl::Status status = fn(*caller);
    limiter_.NoteIfAbandoned(context, method, caller->node, started);
    return net::ToGrpcStatus(status);
  }

  PeerHandler* const handler_;
  net::RequestLimiter& limiter_;
  const bool tls_;
  const std::string cluster_key_;
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
  if (!options.tls.enabled() && options.cluster_key.empty()) {
    return absl::InvalidArgumentError(
        "the peer port needs a way to tell daemons from anyone else: a cluster key "
        "(peer_key_file) or mutual TLS (peer_tls_cert, peer_tls_key and peer_tls_ca)");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   CredentialsFor(options.tls));

  std::unique_ptr<PeerServer> server(new PeerServer());
  const std::string node_name = hello.node_name;
  node::DaemonCounters& counters =
      options.counters != nullptr ? *options.counters : server->own_counters_;
  server->limiter_ = std::make_unique<net::RequestLimiter>(
      options.requests, "the peer port", counters.requests_refused_busy,
      counters.requests_abandoned);
  server->service_ = std::make_unique<Service>(handler, std::move(hello), options.tls.enabled(),
                                               options.cluster_key, *server->limiter_);
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
