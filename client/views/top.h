// `overlapctl top`: a live view of the node, in the manner of `dcgmi dmon` and
// `nvidia-smi dmon`: every interval, one line per GPU with its clocks,
// temperature, power, utilization, health (device_health.h: "ok" or what is
// wrong) and the memory the daemon holds there, and
// what runs on it: the job, its op and phase, and the last op that job finished
// with its step time and the share of its communication hidden. A GPU that
// runs hot, throttles or sits idle inside a job shows up as it happens.
//
// The samples come from one Node.WatchNode stream at the interval asked for
// (the daemon's sampler: devices, running jobs, open sessions: every owner's
// for an admin, else the caller's). A daemon older than the stream is asked
// every interval instead: GetNodeInfo, ListJobs of the running jobs,
// ListSessions (a daemon without sessions shows none). Open sessions follow the GPU lines, one line
// per session and device. With --json every sample is one JSON object on its
// own line.
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

// An open session in a sample, with its steps per second since the previous
// sample (< 0 in the first sample it appears in).
struct TopSession {
  v1::SessionInfo info;
  double steps_per_s = -1;
};

struct TopOptions {
  double interval_s = 1;
  int count = 0;  // samples to print; 0 = until interrupted
};

// The column titles, a "#" line like dmon's.
std::string TopHeader();
// One line per device of `node`; `running` are the running jobs. With open
// `sessions`, then a header and one line per session and device it holds:
// GPU SESSION NAME OWNER LANE STEPS STEPS/S STEP_MS (its ops' last device
// times, summed).
std::string FormatTopSample(const v1::GetNodeInfoResponse& node,
                            const std::vector<v1::Job>& running, int64_t now_ms,
                            const std::vector<TopSession>& sessions = {});
// Each device gets "sessions": [{"id", "name", "owner", "lane", "rank", "steps",
// "steps_per_s" (null in a session's first sample), "step_ms"}].
nlohmann::json TopSampleJson(const v1::GetNodeInfoResponse& node,
                             const std::vector<v1::Job>& running, int64_t now_ms,
                             const std::vector<TopSession>& sessions = {});
// The open sessions (joining, ready) of `listed` as a sample shows them, the
// steps per second against `previous` (the last sample's) over `elapsed_s`.
std::vector<TopSession> OpenTopSessions(const v1::ListSessionsResponse& listed,
                                        const std::vector<TopSession>& previous, double elapsed_s);

// Samples until `count` is reached (or forever); the header repeats every 20
// samples. Exit status as the other commands (a stream the daemon refuses or
// drops ends it, with the daemon's reason).
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
