// How a daemon calls the peer listeners of the others in a job that spans
// them (peer.proto). Behind it, GrpcPeerLink (grpc_peer_link.h) dials with
// the peer TLS settings and the version header; tests may put a fake.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/peer/part_calls.h"

namespace overlap::peer {

class PeerLink {
 public:
  virtual ~PeerLink() = default;
  // Each call gives up after `deadline`: UNAVAILABLE / DEADLINE_EXCEEDED then,
  // and the callee's own status otherwise. Hello: OK when `node` answers, as
  // itself and of this version.
  virtual absl::Status Hello(const std::string& node, absl::Duration deadline) = 0;
  // The part's id on `node`.
  virtual absl::StatusOr<std::string> AdmitPart(const std::string& node, const PartRequest& request,
                                                absl::Duration deadline) = 0;
  virtual absl::Status CancelPart(const std::string& node, const CancelRequest& request,
                                  absl::Duration deadline) = 0;
  virtual absl::StatusOr<HoldAnswer> HoldPart(const std::string& node, const HoldRequest& request,
                                              absl::Duration deadline) = 0;
  virtual absl::Status ReportPart(const std::string& node, const PartReport& report,
                                  absl::Duration deadline) = 0;
  virtual absl::Status StoreSet(const std::string& node, const StoreCall& call,
                                absl::Duration deadline) = 0;
  virtual absl::StatusOr<std::string> StoreGet(const std::string& node, const StoreCall& call,
                                               absl::Duration deadline) = 0;
  // UNIMPLEMENTED by default (a link that cannot ask: the job's verdict then
  // says which node's rings could not be read).
  virtual absl::StatusOr<PartFlight> GetPartFlight(const std::string& node,
                                                   const FlightRequest& request,
                                                   absl::Duration deadline) {
    (void)node;
    (void)request;
    (void)deadline;
    return absl::UnimplementedError("this link cannot read flight rings");
  }
};

}  // namespace overlap::peer
