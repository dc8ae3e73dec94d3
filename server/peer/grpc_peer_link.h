// PeerLink over gRPC: one stub per node, made on first use with the peer TLS
// settings (server/peer/peer_client.h), every call with the version header and
// the caller's proof, every answer taken only with the callee's (in key mode,
// its node key's signature). Before AdmitPart and ReportPart, which carry a
// job's spec, owner and results, the callee proves itself with Hello first.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/peer/peer_client.h"
#include "server/peer/peer_link.h"

namespace overlap::peer {

class GrpcPeerLink final : public PeerLink {
 public:
  // `self`: who this daemon is among its peers, as every call proves.
  GrpcPeerLink(peer::PeerChannelOptions options, peer::PeerIdentity self)
      : options_(std::move(options)), self_(std::move(self)) {}

  absl::Status Hello(const std::string& node, absl::Duration deadline) override;
  absl::StatusOr<std::string> AdmitPart(const std::string& node, const PartRequest& request,
                                        absl::Duration deadline) override;
  absl::Status CancelPart(const std::string& node, const CancelRequest& request,
                          absl::Duration deadline) override;
  absl::StatusOr<HoldAnswer> HoldPart(const std::string& node, const HoldRequest& request,
                                      absl::Duration deadline) override;
  absl::Status ReportPart(const std::string& node, const PartReport& report,
                          absl::Duration deadline) override;
  absl::Status StoreSet(const std::string& node, const StoreCall& call,
                        absl::Duration deadline) override;
  absl::StatusOr<std::string> StoreGet(const std::string& node, const StoreCall& call,
                                       absl::Duration deadline) override;
  absl::StatusOr<PartFlight> GetPartFlight(const std::string& node, const FlightRequest& request,
                                           absl::Duration deadline) override;

 private:
  struct Peer {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::Peers::Stub> stub;
  };
  absl::StatusOr<Peer*> PeerFor(const std::string& node);
  // OK when `node` answers a Hello as itself (key mode), or TLS proves it.
  absl::Status CheckCallee(const std::string& node, absl::Duration deadline);
  // One unary call on `node`'s stub, its answer taken only when the callee
  // proved it is `node` (grpc_peer_link.cc).
  template <typename Request, typename Response>
  absl::StatusOr<Response> Call(const std::string& node,
                                grpc::Status (v1::Peers::Stub::*method)(grpc::ClientContext*,
                                                                        const Request&, Response*),
                                absl::string_view name, const Request& request,
                                absl::Duration deadline);

  const peer::PeerChannelOptions options_;
  const peer::PeerIdentity self_;
  absl::Mutex mu_;
  std::map<std::string, Peer> peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap::peer
