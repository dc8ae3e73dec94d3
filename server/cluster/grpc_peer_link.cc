#include "server/cluster/grpc_peer_link.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace overlap::cluster {
namespace {

absl::Status FromGrpc(const std::string& node, const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat("node ", node, ": ", status.error_message()));
}

// One unary call: a stub's method with a fresh context.
template <typename Request, typename Response, typename Method>
absl::StatusOr<Response> Call(v1::Peers::Stub* stub, Method method, const std::string& node,
                              const Request& request, absl::Duration deadline) {
  grpc::ClientContext context;
  peer::PreparePeerContext(&context, deadline);
  Response response;
  RETURN_IF_ERROR(FromGrpc(node, (stub->*method)(&context, request, &response)));
  return response;
}

}  // namespace

absl::StatusOr<v1::Peers::Stub*> GrpcPeerLink::StubFor(const std::string& node) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<v1::Peers::Stub>& stub = stubs_[node];
  if (stub == nullptr) {
    ASSIGN_OR_RETURN(stub, peer::NewPeerStub(options_, node));
  }
  return stub.get();
}

absl::StatusOr<v1::HelloResponse> GrpcPeerLink::Hello(const std::string& node,
                                                      absl::Duration deadline) {
  ASSIGN_OR_RETURN(v1::Peers::Stub * stub, StubFor(node));
  return peer::Hello(*stub, node, node_name_, deadline);
}

absl::StatusOr<v1::AdmitPartResponse> GrpcPeerLink::AdmitPart(
    const std::string& node, const v1::AdmitPartRequest& request, absl::Duration deadline) {
  ASSIGN_OR_RETURN(v1::Peers::Stub * stub, StubFor(node));
  return Call<v1::AdmitPartRequest, v1::AdmitPartResponse>(stub, &v1::Peers::Stub::AdmitPart,
                                                           node, request, deadline);
}

absl::Status GrpcPeerLink::CancelPart(const std::string& node,
                                      const v1::CancelPartRequest& request,
                                      absl::Duration deadline) {
  ASSIGN_OR_RETURN(v1::Peers::Stub * stub, StubFor(node));
  return Call<v1::CancelPartRequest, v1::CancelPartResponse>(
             stub, &v1::Peers::Stub::CancelPart, node, request, deadline)
      .status();
}

absl::StatusOr<v1::HoldPartResponse> GrpcPeerLink::HoldPart(const std::string& node,
                                                            const v1::HoldPartRequest& request,
                                                            absl::Duration deadline) {
  ASSIGN_OR_RETURN(v1::Peers::Stub * stub, StubFor(node));
  return Call<v1::HoldPartRequest, v1::HoldPartResponse>(stub, &v1::Peers::Stub::HoldPart, node,
                                                         request, deadline);
}

absl::Status GrpcPeerLink::ReportPart(const std::string& node,
                                      const v1::ReportPartRequest& request,
                                      absl::Duration deadline) {
  ASSIGN_OR_RETURN(v1::Peers::Stub * stub, StubFor(node));
  return Call<v1::ReportPartRequest, v1::ReportPartResponse>(
             stub, &v1::Peers::Stub::ReportPart, node, request, deadline)
      .status();
}

absl::Status GrpcPeerLink::StoreSet(const std::string& node, const v1::StoreSetRequest& request,
                                    absl::Duration deadline) {
  ASSIGN_OR_RETURN(v1::Peers::Stub * stub, StubFor(node));
  return Call<v1::StoreSetRequest, v1::StoreSetResponse>(stub, &v1::Peers::Stub::StoreSet, node,
                                                         request, deadline)
      .status();
}

absl::StatusOr<std::string> GrpcPeerLink::StoreGet(const std::string& node,
                                                   const v1::StoreGetRequest& request,
                                                   absl::Duration deadline) {
  ASSIGN_OR_RETURN(v1::Peers::Stub * stub, StubFor(node));
  ASSIGN_OR_RETURN(v1::StoreGetResponse response,
                   (Call<v1::StoreGetRequest, v1::StoreGetResponse>(
                       stub, &v1::Peers::Stub::StoreGet, node, request, deadline)));
  return std::move(*response.mutable_value());
}

}  // namespace overlap::cluster
