// Schedules decided before a job runs: a job spanning daemons may not time
// its candidates (nodes that timed differently would choose differently and
// their collectives would pair up wrongly), so its coordinator decides every
// op's schedule once, by one rule, and sends the decisions to every part
// (peer.proto, AdmitPartRequest.schedules). A part checks them against what it
// can run and runs them; it decides nothing itself.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "common/graph.h"
#include "common/planner/cost_model.h"
#include "common/schedule.h"

namespace overlap::ops {

// Each op's schedule, by op id.
using DecidedSchedules = std::map<std::string, Schedule>;
// Why each was decided, by op id, for the report.
using DecisionNotes = std::map<std::string, std::string>;

// What the coordinator plans with where it has a calibration
// (common/planner/): the cost model, and the ranks to a node.
struct SpanningPlanner {
  const planner::CostModel* model = nullptr;
  int devices_per_node = 0;
};

// The coordinator's decisions for every op of `spec` over `world` ranks (the
// whole mesh, every node's): SpanningSchedule of the op's candidates, on a
// backend that pins NCCL's algorithms or not (`library_algorithms`).
// INVALID_ARGUMENT naming the op where no candidate moves its data through
// collectives only.
//
// With `planner` the coordinator predicts each candidate that moves data
// through collectives only (groups that span nodes over the link between
// nodes) and takes the fastest; where the planner cannot say, the rule. Each
// decision's reason goes to `notes` when given.
absl::StatusOr<DecidedSchedules> DecideSpanningSchedules(const JobSpec& spec, int world,
                                                         bool library_algorithms,
                                                         const SpanningPlanner* planner = nullptr,
                                                         DecisionNotes* notes = nullptr);

// OK when `decided` holds one schedule for every op of `spec` and no other
// (else INVALID_ARGUMENT naming the op), each one of the op's candidates here
// that moves data through collectives only (else FAILED_PRECONDITION: this
// node could not run what the coordinator decided, and the nodes would
// disagree).
absl::Status CheckDecidedSchedules(const JobSpec& spec, int world, bool library_algorithms,
                                   const DecidedSchedules& decided);

}  // namespace overlap::ops
