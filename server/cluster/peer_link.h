// How a daemon calls the peer listeners of the others in a job that spans
// them (peer.proto). Behind it, GrpcPeerLink (grpc_peer_link.h) dials with
// the peer TLS settings and the version header; tests may put a fake.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "overlap/v1/peer.pb.h"

namespace overlap::cluster {

class PeerLink {
 public:
  virtual ~PeerLink() = default;
  // Each call gives up after `deadline`: UNAVAILABLE / DEADLINE_EXCEEDED then,
  // and the callee's own status otherwise.
  virtual absl::StatusOr<v1::HelloResponse> Hello(const std::string& node,
                                                  absl::Duration deadline) = 0;
  virtual absl::StatusOr<v1::AdmitPartResponse> AdmitPart(const std::string& node,
                                                          const v1::AdmitPartRequest& request,
                                                          absl::Duration deadline) = 0;
  virtual absl::Status CancelPart(const std::string& node, const v1::CancelPartRequest& request,
                                  absl::Duration deadline) = 0;
  virtual absl::StatusOr<v1::HoldPartResponse> HoldPart(const std::string& node,
                                                        const v1::HoldPartRequest& request,
                                                        absl::Duration deadline) = 0;
  virtual absl::Status ReportPart(const std::string& node, const v1::ReportPartRequest& request,
                                  absl::Duration deadline) = 0;
  virtual absl::Status StoreSet(const std::string& node, const v1::StoreSetRequest& request,
                                absl::Duration deadline) = 0;
  virtual absl::StatusOr<std::string> StoreGet(const std::string& node,
                                               const v1::StoreGetRequest& request,
                                               absl::Duration deadline) = 0;
};

}  // namespace overlap::cluster
