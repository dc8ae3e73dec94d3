// `overlapctl tuning list|forget`: the schedules autotune chose and persisted
// (the daemon's tuning cache), which every later job with the same op, shape,
// dtype and tp uses without tuning again. `list` shows each choice, what it
// measured and whether a job on this daemon can still use it (stale: tuned by
// another overlapd build, driver, library or setting); `forget` drops choices
// so that the next job tunes afresh, e.g. after a node's NVLink or firmware
// changed in a way no version string shows.
#pragma once

#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "client/core/daemon_client.h"
#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

// `op` an op type or empty; `shape` "MxKxN" or empty. INVALID_ARGUMENT naming
// the flag for an unknown op type or a malformed shape.
absl::StatusOr<v1::TuningFilter> ParseTuningFilter(const std::string& op, const std::string& shape,
                                                   bool stale_only);

// One row per choice: op, shape, dtype, tp, what the op asked for, the choice,
// its step when tuned, when, and whether it is current.
std::string FormatTunedSchedules(const v1::ListTunedSchedulesResponse& response);

int RunTuningList(DaemonClient& client, const v1::TuningFilter& filter, bool json,
                  std::ostream& out, std::ostream& err);
int RunTuningForget(DaemonClient& client, const v1::TuningFilter& filter, bool all, bool json,
                    std::ostream& out, std::ostream& err);

}  // namespace overlap::client
