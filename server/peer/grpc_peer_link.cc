#include "server/peer/grpc_peer_link.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/wire/flight_wire.h"
#include "server/wire/peer_wire.h"

namespace overlap::peer {
namespace {

absl::Status FromGrpc(const std::string& node, const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat("node ", node, ": ", status.error_message()));
}

}  // namespace

absl::StatusOr<GrpcPeerLink::Peer*> GrpcPeerLink::PeerFor(const std::string& node) {
  absl::MutexLock lock(&mu_);
  Peer& peer = peers_[node];
  if (peer.stub == nullptr) {
    ASSIGN_OR_RETURN(peer.channel, peer::NewPeerChannel(options_, node));
    peer.stub = v1::Peers::NewStub(peer.channel);
  }
  return &peer;
}

// A fresh context for each call (peer::CheckPeerReply checks the answer).
template <typename Request, typename Response>
absl::StatusOr<Response> GrpcPeerLink::Call(
    const std::string& node,
    grpc::Status (v1::Peers::Stub::*method)(grpc::ClientContext*, const Request&, Response*),
    absl::string_view name, const Request& request, absl::Duration deadline) {
  ASSIGN_OR_RETURN(Peer * peer, PeerFor(node));
  grpc::ClientContext context;
  const std::string nonce =
      peer::PreparePeerContext(&context, deadline, self_, name, node, request);
  Response response;
  const grpc::Status status = (peer->stub.get()->*method)(&context, request, &response);
  RETURN_IF_ERROR(FromGrpc(node, status));
  RETURN_IF_ERROR(peer::CheckPeerReply(context, self_, name, node, nonce, status, response));
  return response;
}

absl::Status GrpcPeerLink::Hello(const std::string& node, absl::Duration deadline) {
  ASSIGN_OR_RETURN(Peer * peer, PeerFor(node));
  const absl::Time give_up = absl::Now() + deadline;
  absl::Status hello = peer::Hello(*peer->stub, node, self_, deadline).status();
  if (hello.code() != absl::StatusCode::kUnavailable) return hello;
  // A channel whose peer went away fails each call at once until its next
  // reconnection; a peer that restarted since is worth one more try once the
  // channel connects again, rather than a stale "Connection refused".
  const absl::Time connect_by = std::min(give_up, absl::Now() + absl::Seconds(1));
  if (!peer->channel->WaitForConnected(absl::ToChronoTime(connect_by))) return hello;
  return peer::Hello(*peer->stub, node, self_, give_up - absl::Now()).status();
}

absl::Status GrpcPeerLink::CheckCallee(const std::string& node, absl::Duration deadline) {
  if (self_.known_nodes.empty()) return absl::OkStatus();  // TLS proves the callee
  return Hello(node, deadline);
}

absl::StatusOr<std::string> GrpcPeerLink::AdmitPart(const std::string& node,
                                                    const PartRequest& request,
                                                    absl::Duration deadline) {
  // The spec, its owner and the job's rights go only to a node that just
  // proved it is that node: a process that took a stopped peer's port cannot
  // sign Hello's fresh nonce.
  const absl::Time give_up = absl::Now() + deadline;
  RETURN_IF_ERROR(CheckCallee(node, deadline));
  deadline = std::max(give_up - absl::Now(), absl::Milliseconds(1));
  ASSIGN_OR_RETURN(
      v1::AdmitPartResponse response,
      Call(node, &v1::Peers::Stub::AdmitPart, "AdmitPart", wire::ToProto(request), deadline));
  return std::move(*response.mutable_part_id());
}

absl::Status GrpcPeerLink::CancelPart(const std::string& node, const CancelRequest& request,
                                      absl::Duration deadline) {
  return Call(node, &v1::Peers::Stub::CancelPart, "CancelPart", wire::ToProto(request), deadline)
      .status();
}

absl::StatusOr<HoldAnswer> GrpcPeerLink::HoldPart(const std::string& node,
                                                  const HoldRequest& request,
                                                  absl::Duration deadline) {
  ASSIGN_OR_RETURN(
      const v1::HoldPartResponse response,
      Call(node, &v1::Peers::Stub::HoldPart, "HoldPart", wire::ToProto(request), deadline));
  return wire::FromProto(response);
}

absl::Status GrpcPeerLink::ReportPart(const std::string& node, const PartReport& report,
                                      absl::Duration deadline) {
  // A part's results go only to its coordinator proven (as AdmitPart's spec).
  const absl::Time give_up = absl::Now() + deadline;
  RETURN_IF_ERROR(CheckCallee(node, deadline));
  deadline = std::max(give_up - absl::Now(), absl::Milliseconds(1));
  return Call(node, &v1::Peers::Stub::ReportPart, "ReportPart", wire::ToProto(report), deadline)
      .status();
}

absl::Status GrpcPeerLink::StoreSet(const std::string& node, const StoreCall& call,
                                    absl::Duration deadline) {
  return Call(node, &v1::Peers::Stub::StoreSet, "StoreSet", wire::ToStoreSet(call), deadline)
      .status();
}

absl::StatusOr<std::string> GrpcPeerLink::StoreGet(const std::string& node, const StoreCall& call,
                                                   absl::Duration deadline) {
  ASSIGN_OR_RETURN(v1::StoreGetResponse response, Call(node, &v1::Peers::Stub::StoreGet, "StoreGet",
                                                       wire::ToStoreGet(call), deadline));
  return std::move(*response.mutable_value());
}

absl::StatusOr<PartFlight> GrpcPeerLink::GetPartFlight(const std::string& node,
                                                       const FlightRequest& request,
                                                       absl::Duration deadline) {
  ASSIGN_OR_RETURN(const v1::GetPartFlightResponse response,
                   Call(node, &v1::Peers::Stub::GetPartFlight, "GetPartFlight",
                        wire::ToProto(request), deadline));
  return wire::FromProto(response);
}

}  // namespace overlap::peer
