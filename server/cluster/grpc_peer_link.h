// PeerLink over gRPC: one stub per node, made on first use with the peer TLS
// settings (server/peer/peer_client.h), every call with the version header.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/cluster/peer_link.h"
#include "server/peer/peer_client.h"

namespace overlap::cluster {

class GrpcPeerLink final : public PeerLink {
 public:
  // `node_name`: how this daemon names itself in Hello.
  GrpcPeerLink(peer::PeerChannelOptions options, std::string node_name)
      : options_(std::move(options)), node_name_(std::move(node_name)) {}

  absl::StatusOr<v1::HelloResponse> Hello(const std::string& node,
                                          absl::Duration deadline) override;
  absl::StatusOr<v1::AdmitPartResponse> AdmitPart(const std::string& node,
                                                  const v1::AdmitPartRequest& request,
                                                  absl::Duration deadline) override;
  absl::Status CancelPart(const std::string& node, const v1::CancelPartRequest& request,
                          absl::Duration deadline) override;
  absl::StatusOr<v1::HoldPartResponse> HoldPart(const std::string& node,
                                                const v1::HoldPartRequest& request,
                                                absl::Duration deadline) override;
  absl::Status ReportPart(const std::string& node, const v1::ReportPartRequest& request,
                          absl::Duration deadline) override;
  absl::Status StoreSet(const std::string& node, const v1::StoreSetRequest& request,
                        absl::Duration deadline) override;
  absl::StatusOr<std::string> StoreGet(const std::string& node,
                                       const v1::StoreGetRequest& request,
                                       absl::Duration deadline) override;

 private:
  absl::StatusOr<v1::Peers::Stub*> StubFor(const std::string& node);

  const peer::PeerChannelOptions options_;
  const std::string node_name_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<v1::Peers::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap::cluster
