// `overlapctl plan`: what each op of a graph would take under each candidate
// schedule, predicted from a calibration without running anything, and the
// best; `--what-if` asks about another tp, link or GPU. `--replay` predicts the
// candidates a recorded `bench --json` measured, for judging the planner
// against what was measured (bench/planner_replay.sh).
#pragma once

#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "client/core/daemon_client.h"
#include "common/planner/cost_model.h"

namespace overlap::client {

struct PlanOptions {
  std::string graph_file;
  int tp = 0;                    // 0: the graph's (its devices, or the daemon's count)
  std::string calibration_file;  // empty: the daemon's stored calibration
  std::string what_if;           // "tp=8,link-gbps=400,gemm-tflops=700,nodes=4,inter-node-gbps=50"
  std::string replay_file;       // a bench --json result instead of a graph
  // A cluster that may not exist: the graph's data-parallel replicas each on
  // one of `nodes` nodes, joined by a link of `link_gbps` bus bandwidth
  // (what-if nodes= and inter-node-gbps=).
  int nodes = 0;
  double link_gbps = 0;
};

// INVALID_ARGUMENT naming the key for anything but KEY=NUMBER pairs of the
// keys above with sane values.
absl::StatusOr<planner::WhatIf> ParseWhatIf(const std::string& text);

int RunPlan(DaemonClient& client, const PlanOptions& options, bool json, std::ostream& out,
            std::ostream& err);

}  // namespace overlap::client
