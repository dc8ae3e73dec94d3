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
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "client/daemon_client.h"
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

}  // namespace overlap::client
