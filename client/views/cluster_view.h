// Several daemons at once, for `overlapctl node|top|check --nodes A,B,...`
// (or --cluster-file): a client per daemon's user address (each as --addr
// would take it, with its TLS: cluster_file.h), calls made on every daemon at
// once, and `node --nodes`: the
// daemons' versions and health side by side, with what disagrees or is
// unhealthy flagged. A daemon that does not answer is a finding, not an end.
//
// The formatting and flagging are pure functions of the answers; RunClusterNode
// and CallEveryNode do I/O. Thread-compatible: one caller at a time (each
// client is used by one thread per CallEveryNode).
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/core/daemon_client.h"
#include "client/views/cluster_file.h"
#include "nlohmann/json.hpp"
#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

// One daemon of the view, by its user address as given.
struct NodeClient {
  std::string address;
  std::unique_ptr<DaemonClient> client;
};

// A client for each node, in order. INVALID_ARGUMENT for an empty list, an
// empty or repeated address, or what DaemonClient::Create refuses (TLS files,
// TLS to a unix socket), naming the address; connecting waits for the first call.
absl::StatusOr<std::vector<NodeClient>> ConnectNodes(const std::vector<ClusterNode>& nodes);

// `call` on every node at once (a thread each, so that one daemon that does
// not answer costs one deadline, not one per node); the answers in order.
template <typename T>
std::vector<absl::StatusOr<T>> CallEveryNode(
    std::vector<NodeClient>& nodes, const std::function<absl::StatusOr<T>(DaemonClient&)>& call) {
  std::vector<absl::StatusOr<T>> answers(nodes.size(), absl::UnknownError("not called"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < nodes.size(); ++i) {
    threads.emplace_back([&, i] { answers[i] = call(*nodes[i].client); });
  }
  for (std::thread& t : threads) t.join();
  return answers;
}

// A node's GetNodeInfo, or why it gave none.
struct NodeAnswer {
  std::string address;
  absl::StatusOr<v1::GetNodeInfoResponse> info;
};
std::vector<NodeAnswer> GetEveryNodeInfo(std::vector<NodeClient>& nodes);

// Why a node gave no answer, short: "cannot reach overlapd: REASON" or
// "PERMISSION_DENIED: MESSAGE".
std::string NoAnswerText(const absl::Status& status);
// {"code": "UNAVAILABLE", "message": ..., "unreachable": true}.
nlohmann::json NoAnswerJson(const absl::Status& status);

// "0.1.0 (899d7a7)": what a version mismatch compares.
std::string OverlapdVersion(const v1::GetNodeInfoResponse& node);
// Why a node that answered is unhealthy, one sentence each: the daemon says it
// is not (draining, or its engine failed), and each GPU's problem
// (device_health.h); empty when it is healthy.
std::vector<std::string> NodeHealthProblems(const v1::GetNodeInfoResponse& node);

// What `node --nodes` flags among the nodes that answered.
struct ClusterFindings {
  bool version_mismatch = false;        // overlapd version or commit differ
  bool nccl_mismatch = false;           // NCCL versions differ
  std::vector<std::string> unhealthy;   // addresses
  std::vector<std::string> unanswered;  // addresses
  std::vector<std::string> lines;       // one sentence each, as the text prints them
};
ClusterFindings FindClusterProblems(const std::vector<NodeAnswer>& nodes);

// One column per node (titled by its address), one row per field (peer name,
// hostname, backend, healthy, GPU health, overlapd, nccl, cuda, cublas,
// devices, between daemons, NCCL/CUDA env), a last column that says MISMATCH
// or UNHEALTHY on the rows flagged (and "differs" on the CUDA driver and env
// rows, which are not flagged); then the findings' lines, or a line that all
// agree and are healthy.
std::string FormatClusterNodes(const std::vector<NodeAnswer>& nodes);
// {"nodes": [{"address", "answered", "info" (the protobuf JSON) and
// "health_problems", or "error"}], "version_mismatch", "nccl_mismatch",
// "unhealthy_nodes", "unanswered_nodes", "findings"}.
nlohmann::json ClusterNodesJson(const std::vector<NodeAnswer>& nodes);

// `overlapctl node --nodes`. Exit status: a node that did not answer gives
// its call's status (kExitUnreachable or kExitRefused, its message on `err`),
// which outranks kExitJobFailed for a mismatch or an unhealthy node; kExitOk
// when every node answered, agrees and is healthy.
int RunClusterNode(std::vector<NodeClient>& nodes, bool json, std::ostream& out, std::ostream& err);

}  // namespace overlap::client
