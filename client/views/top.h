// `overlapctl top`: a live view of the node, in the manner of `dcgmi dmon` and
// `nvidia-smi dmon`: every interval, one line per GPU with its clocks,
// temperature, power, utilization, health (device_health.h: "ok" or what is
// wrong) and the memory the daemon holds there, and
// what runs on it: the job, its op and phase, and the last op that job finished
// with its step time and the share of its communication hidden. A GPU that
// runs hot, throttles or sits idle inside a job shows up as it happens.
//
// Each sample is two calls (GetNodeInfo, ListJobs of the running jobs). With
// --json every sample is one JSON object on its own line.
//
// `top --nodes`: every node's GPUs in each sample, a node column (its address)
// after the time; the nodes are asked at once, and one that does not answer
// is a row that says why.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/core/daemon_client.h"
#include "client/views/cluster_view.h"
#include "nlohmann/json.hpp"
#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

struct TopOptions {
  double interval_s = 1;
  int count = 0;  // samples to print; 0 = until interrupted
};

// The column titles, a "#" line like dmon's.
std::string TopHeader();
// One line per device of `node`; `running` are the running jobs.
std::string FormatTopSample(const v1::GetNodeInfoResponse& node,
                            const std::vector<v1::Job>& running, int64_t now_ms);
nlohmann::json TopSampleJson(const v1::GetNodeInfoResponse& node,
                             const std::vector<v1::Job>& running, int64_t now_ms);

// Samples until `count` is reached (or forever); the header repeats every 20
// samples. Exit status as the other commands.
int RunTop(DaemonClient& client, const TopOptions& options, bool json, std::ostream& out,
           std::ostream& err);

// One node's part of a `top --nodes` sample.
struct NodeTopSample {
  std::string address;
  absl::Status status;  // why it gave no sample; OK when it did
  v1::GetNodeInfoResponse node;
  std::vector<v1::Job> running;
};
// The header and lines of a `top --nodes` sample: TopHeader's columns with a
// node column of `node_width` after the time; a node that did not answer is
// one line, "no answer: " and why (NoAnswerText).
std::string ClusterTopHeader(size_t node_width);
size_t ClusterTopNodeWidth(const std::vector<NodeTopSample>& nodes);
std::string FormatClusterTopSample(const std::vector<NodeTopSample>& nodes, int64_t now_ms);
// {"time_ms", "nodes": [{"address", "devices": [as TopSampleJson]} or
// {"address", "error": NoAnswerJson}]}.
nlohmann::json ClusterTopSampleJson(const std::vector<NodeTopSample>& nodes, int64_t now_ms);
// Samples every node until `count`. Exit status: kExitOk when every node
// answered the last sample; otherwise the status of a call that failed there
// (kExitUnreachable, kExitRefused), its message on `err`.
int RunClusterTop(std::vector<NodeClient>& nodes, const TopOptions& options, bool json,
                  std::ostream& out, std::ostream& err);

}  // namespace overlap::client
