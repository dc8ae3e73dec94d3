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
#include "server/net/status_util.h"
#include "server/peer/peer_auth.h"
#include "server/wire/flight_wire.h"
#include "server/wire/peer_wire.h"

namespace overlap::peer {
namespace {

// The first value of an auth context property, "" when absent.
std::string Property(const grpc::AuthContext& auth, const char* name) {
  for (const grpc::string_ref& value : auth.FindPropertyValues(name)) {
    if (value.size() > 0) return std::string(value.data(), value.size());
  }
  return "";
}

// Without TLS (loopback only): gRPC's local credentials, which add nothing on
// the wire (callers dial in plaintext) but, unlike insecure ones, take the
// gate that runs before a request is read.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> CredentialsFor(const PeerTls& tls) {
  if (!tls.enabled()) return grpc::experimental::LocalServerCredentials(LOCAL_TCP);
  return PeerServerCredentials(tls);
}

}  // namespace

class PeerServer::Service final : public v1::Peers::Service {
 public:
  Service(PeerHandler* handler, PeerHello hello, std::shared_ptr<PeerGate> gate,
          std::shared_ptr<const NodeKey> node_key, net::RequestLimiter& limiter)
      : handler_(handler),
        limiter_(limiter),
        gate_(std::move(gate)),
        node_key_(std::move(node_key)),
        hello_(std::move(hello)) {}

  void set_node_name(const std::string& name) {
    absl::MutexLock lock(&mu_);
    hello_.node_name = name;
  }

  grpc::Status Hello(grpc::ServerContext* context, const v1::HelloRequest* request,
                     v1::HelloResponse* response) override {
    absl::StatusOr<Admitted> admitted = Admit(*context, "Hello", *request);
    if (!admitted.ok()) return net::ToGrpcStatus(admitted.status());
    GetLogger("peer")->debug("Hello from {} ({})", admitted->caller.node, context->peer());
    {
      absl::MutexLock lock(&mu_);
      response->set_version(OVERLAP_VERSION);
      response->set_backend(hello_.backend);
      response->set_device_count(hello_.device_count);
      response->set_node(hello_.node_name);
    }
    return Answer(context, *admitted, "Hello", grpc::Status::OK, *response);
  }

  grpc::Status AdmitPart(grpc::ServerContext* context, const v1::AdmitPartRequest* request,
                         v1::AdmitPartResponse* response) override {
    return Serve(
        context, "AdmitPart", *request, *response, [&](const PeerCaller& caller) -> absl::Status {
          ASSIGN_OR_RETURN(const PartRequest part, wire::FromProto(*request));
          ASSIGN_OR_RETURN(*response->mutable_part_id(), handler_->AdmitPart(caller, part));
          return absl::OkStatus();
        });
  }

  grpc::Status CancelPart(grpc::ServerContext* context, const v1::CancelPartRequest* request,
                          v1::CancelPartResponse* response) override {
    return Serve(context, "CancelPart", *request, *response, [&](const PeerCaller& caller) {
      return handler_->CancelPart(caller, wire::FromProto(*request));
    });
  }

  grpc::Status GetPartFlight(grpc::ServerContext* context, const v1::GetPartFlightRequest* request,
                             v1::GetPartFlightResponse* response) override {
    return ServeAnswer(context, "GetPartFlight", *request, response, [&](const PeerCaller& caller) {
      return handler_->GetPartFlight(caller, wire::FromProto(*request));
    });
  }

  grpc::Status HoldPart(grpc::ServerContext* context, const v1::HoldPartRequest* request,
                        v1::HoldPartResponse* response) override {
    return ServeAnswer(context, "HoldPart", *request, response, [&](const PeerCaller& caller) {
      return handler_->HoldPart(caller, wire::FromProto(*request));
    });
  }

  grpc::Status ReportPart(grpc::ServerContext* context, const v1::ReportPartRequest* request,
                          v1::ReportPartResponse* response) override {
    return Serve(context, "ReportPart", *request, *response, [&](const PeerCaller& caller) {
      return handler_->ReportPart(caller, wire::FromProto(*request));
    });
  }

  grpc::Status StoreSet(grpc::ServerContext* context, const v1::StoreSetRequest* request,
                        v1::StoreSetResponse* response) override {
    return Serve(context, "StoreSet", *request, *response, [&](const PeerCaller& caller) {
      return handler_->StoreSet(caller, wire::FromProto(*request));
    });
  }

  grpc::Status StoreGet(grpc::ServerContext* context, const v1::StoreGetRequest* request,
                        v1::StoreGetResponse* response) override {
    return Serve(context, "StoreGet", *request, *response,
                 [&](const PeerCaller& caller) -> absl::Status {
                   ASSIGN_OR_RETURN(*response->mutable_value(),
                                    handler_->StoreGet(caller, wire::FromProto(*request)));
                   return absl::OkStatus();
                 });
  }

 private:
  struct Admitted {
    PeerCaller caller;
    std::string nonce;  // the caller's token's; "" without a cluster key
  };

  // The caller as proven by the gate's checks, run again on this call's own
  // metadata (peer_gate.h says why), once the request read is the one its
  // token was made for; why not otherwise, logged.
  absl::StatusOr<Admitted> Admit(const grpc::ServerContext& context, absl::string_view method,
                                 const google::protobuf::Message& request) {
    std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
    absl::StatusOr<ProvenCall> proven =
        auth == nullptr ? absl::UnauthenticatedError("the call has no auth context")
                        : gate_->Verify(context.client_metadata(), method, *auth,
                                        /*take_nonce=*/false);
    absl::Status status = proven.status();
    if (status.ok() && proven->token.has_value()) {
      status = CheckRequestMatchesToken(*proven->token, CanonicalBytes(request));
    }
    if (!status.ok()) {
      GetLogger("peer")->warn("refused {} from {}: {}", std::string(method), context.peer(),
                              std::string(status.message()));
      return status;
    }
    Admitted admitted;
    admitted.caller.node = proven->node;
    admitted.caller.peer_uri = context.peer();
    admitted.caller.tls_subject = Property(*auth, "x509_subject");
    if (admitted.caller.tls_subject.empty()) {
      admitted.caller.tls_subject = Property(*auth, "x509_common_name");
    }
    if (proven->token.has_value()) admitted.nonce = proven->token->nonce;
    return admitted;
  }

  // `status` with the callee's proof of who answered (kCalleeProofHeader),
  // when this daemon has a node key and the call a token's nonce.
  grpc::Status Answer(grpc::ServerContext* context, const Admitted& admitted,
                      absl::string_view method, grpc::Status status,
                      const google::protobuf::Message& response) {
    if (node_key_ == nullptr || admitted.nonce.empty()) return status;
    PeerReplyFacts facts{std::string(method),
                         admitted.caller.node,
                         node_name(),
                         admitted.nonce,
                         static_cast<int>(status.error_code()),
                         status.ok() ? CanonicalBytes(response) : ""};
    context->AddTrailingMetadata(kCalleeProofHeader, SignPeerReply(*node_key_, facts));
    return status;
  }

  std::string node_name() {
    absl::MutexLock lock(&mu_);
    return hello_.node_name;
  }

  template <typename Fn>
  grpc::Status Serve(grpc::ServerContext* context, absl::string_view method,
                     const google::protobuf::Message& request,
                     const google::protobuf::Message& response, Fn&& fn) {
    absl::StatusOr<Admitted> admitted = Admit(*context, method, request);
    if (!admitted.ok()) return net::ToGrpcStatus(admitted.status());
    if (handler_ == nullptr) {
      return Answer(context, *admitted, method,
                    grpc::Status(grpc::StatusCode::UNAVAILABLE, "this daemon runs no cluster jobs"),
                    response);
    }
    const std::string& node = admitted->caller.node;
    absl::StatusOr<net::RequestLimiter::Ticket> ticket = limiter_.Enter(node);
    if (!ticket.ok()) {
      return Answer(context, *admitted, method, net::ToGrpcStatus(ticket.status()), response);
    }
    const absl::Time started = absl::Now();
    const absl::Status status = fn(admitted->caller);
    limiter_.NoteIfAbandoned(*context, method, node, started);
    return Answer(context, *admitted, method, net::ToGrpcStatus(status), response);
  }

  // Serve a call whose response is the handler's answer (`fn`'s StatusOr) as its proto.
  template <typename Response, typename Fn>
  grpc::Status ServeAnswer(grpc::ServerContext* context, absl::string_view method,
                           const google::protobuf::Message& request, Response* response, Fn&& fn) {
    return Serve(context, method, request, *response,
                 [&](const PeerCaller& caller) -> absl::Status {
                   ASSIGN_OR_RETURN(const auto answer, fn(caller));
                   *response = wire::ToProto(answer);
                   return absl::OkStatus();
                 });
  }

  PeerHandler* const handler_;
  net::RequestLimiter& limiter_;
  const std::shared_ptr<PeerGate> gate_;
  const std::shared_ptr<const NodeKey> node_key_;
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
  auto gate = std::make_shared<PeerGate>(PeerGateOptions{
      options.tls.enabled(), options.cluster_key, options.known_nodes, kMaxRememberedNonces});
  if (!hello.node_name.empty()) gate->set_node_name(hello.node_name);
  credentials->SetAuthMetadataProcessor(gate);

  std::unique_ptr<PeerServer> server(new PeerServer());
  const std::string node_name = hello.node_name;
  node::DaemonCounters& counters =
      options.counters != nullptr ? *options.counters : server->own_counters_;
  server->limiter_ = std::make_unique<net::RequestLimiter>(options.requests, "the peer port",
                                                           counters.requests_refused_busy,
                                                           counters.requests_abandoned);
  server->gate_ = gate;
  server->service_ = std::make_unique<Service>(handler, std::move(hello), gate, options.node_key,
                                               *server->limiter_);
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
  server->gate_->set_node_name(server->node_name_);
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
