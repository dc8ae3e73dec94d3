// A job's graph as this daemon admitted it: parsed and validated once, on its
// way in, then handed on as this typed object (queue, runner, coordinator,
// a part's run) instead of its text. The store keeps the text for history; it
// is parsed again only for a job still queued when the daemon restarts.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/graph.h"
#include "server/ops/decided_schedules.h"

namespace overlap::jobs {

struct AdmittedGraph {
  JobSpec spec;
  // A local job: its device group in rank order. A job spanning daemons: this
  // node's devices, rank order within the node (every node brings as many).
  std::vector<int> devices;
  // A job spanning daemons: nodes x devices, ranks node-major. 0 for a local job.
  int world = 0;
  // What the job allocates on each of its devices (admission's estimate,
  // runner::JobBytesPerDevice): the queue weighs it against a device's free
  // pool while a session holds the device.
  int64_t bytes_per_device = 0;
  // A job spanning daemons: every op's schedule, as its coordinator decided
  // it (ops/decided_schedules.h). Empty for a local job, whose autos are tuned.
  ops::DecidedSchedules schedules;
  ops::DecisionNotes schedule_notes;  // why each was decided, for the report
};

// Shared and never changed once admitted: a job's entries (the queue, the
// coordinator's state, a running part) point at one graph.
using GraphPtr = std::shared_ptr<const AdmittedGraph>;

}  // namespace overlap::jobs
