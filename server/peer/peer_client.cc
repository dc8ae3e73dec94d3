#include "server/peer/peer_client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/peer/peer_auth.h"

namespace overlap::peer {
namespace {

// The most of a peer's self-description quoted in a message.
constexpr size_t kMaxQuoted = 200;

std::string Shorten(const std::string& text) {
  return absl::StrCat(absl::CHexEscape(text.substr(0, kMaxQuoted)),
                      text.size() > kMaxQuoted ? "..." : "");
}

std::string Quote(const std::string& text) { return absl::StrCat("\"", Shorten(text), "\""); }

}  // namespace

absl::StatusOr<std::unique_ptr<v1::Peers::Stub>> NewPeerStub(const PeerChannelOptions& options,
                                                             const std::string& address) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, NewPeerChannel(options, address));
  return v1::Peers::NewStub(channel);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> NewPeerChannel(const PeerChannelOptions& options,
                                                              const std::string& address) {
  ASSIGN_OR_RETURN(const PeerAddress parsed,
                   ParsePeerAddress("peer", address, /*allow_port_zero=*/false));
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options.tls.enabled()) {
    ASSIGN_OR_RETURN(credentials, PeerChannelCredentials(options.tls));
  } else if (parsed.loopback) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("peer: \"", address,
                     "\": not a loopback address: calls to it need mutual TLS; set peer_tls_cert, "
                     "peer_tls_key and peer_tls_ca"));
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(address, credentials, args);
}

std::string PreparePeerContext(grpc::ClientContext* context, absl::Duration timeout,
                               const PeerIdentity& self, absl::string_view method,
                               const std::string& callee,
                               const google::protobuf::Message& request) {
  context->AddMetadata(kVersionHeader, OVERLAP_VERSION);
  context->AddMetadata(kNodeHeader, self.node);
  std::string nonce;
  if (!self.cluster_key.empty()) {
    const PeerCallFacts facts{std::string(method), self.node, callee, CanonicalBytes(request)};
    context->AddMetadata(kAuthHeader, SignPeerCall(self.cluster_key, facts, absl::Now(),
                                                   self.node_key.get(), &nonce));
  }
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return nonce;
}

absl::Status CheckPeerReply(const grpc::ClientContext& context, const PeerIdentity& self,
                            absl::string_view method, const std::string& callee,
                            const std::string& nonce, const grpc::Status& status,
                            const google::protobuf::Message& response) {
  if (!status.ok() || nonce.empty() || self.known_nodes.empty()) return absl::OkStatus();
  const auto known = self.known_nodes.find(callee);
  if (known == self.known_nodes.end()) {
    return absl::UnauthenticatedError(
        absl::StrCat("node ", Shorten(callee),
                     " has no key in this daemon's peer_known_nodes_file: its "
                     "answers cannot be told from an impostor's"));
  }
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto proof = trailers.find(kCalleeProofHeader);
  const PeerReplyFacts facts{
      std::string(method),     self.node, callee, nonce, static_cast<int>(status.error_code()),
      CanonicalBytes(response)};
  return VerifyPeerReply(known->second, facts,
                         proof == trailers.end()
                             ? absl::string_view()
                             : absl::string_view(proof->second.data(), proof->second.size()));
}

absl::StatusOr<v1::HelloResponse> Hello(v1::Peers::StubInterface& stub, const std::string& address,
                                        const PeerIdentity& self, absl::Duration timeout) {
  v1::HelloRequest request;
  request.set_node(self.node);
  grpc::ClientContext context;
  const std::string nonce = PreparePeerContext(&context, timeout, self, "Hello", address, request);
  v1::HelloResponse response;
  const grpc::Status status = stub.Hello(&context, request, &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat("peer ", address, ": ", status.error_message()));
  }
  RETURN_IF_ERROR(CheckPeerReply(context, self, "Hello", address, nonce, status, response));
  if (response.version() != OVERLAP_VERSION) {
    return absl::FailedPreconditionError(absl::StrCat("peer ", address, " runs overlapd ",
                                                      Quote(response.version()), ", this daemon ",
                                                      OVERLAP_VERSION, ": upgrade them together"));
  }
  if (response.node() != address) {
    return absl::FailedPreconditionError(
        absl::StrCat("peer ", address, " names itself ", Quote(response.node()),
                     ": its node_name must be the address this daemon lists in peers"));
  }
  return response;
}

absl::Status CheckListedPeer(const DaemonConfig& config, const std::string& address) {
  if (std::find(config.peers.begin(), config.peers.end(), address) != config.peers.end()) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat("node ", Shorten(address),
                                                  " is not in this daemon's peers: (",
                                                  absl::StrJoin(config.peers, ", "), ")"));
}

}  // namespace overlap::peer
