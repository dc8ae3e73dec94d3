// Where a calibration comes from on the client: a file (`--calibration`), or
// the daemon's own, kept beside its tuning cache.
#pragma once

#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "client/core/daemon_client.h"
#include "common/planner/calibration.h"

namespace overlap::client {

// The calibration in `file`, else the daemon's for `tp` ranks (0: its
// devices). NOT_FOUND when the daemon has none, with how to make one.
absl::StatusOr<planner::Calibration> LoadCalibration(DaemonClient& client, const std::string& file,
                                                     int tp, std::ostream& err);

// Prints why no calibration could be had; the exit status.
int ExitForCalibrationError(const absl::Status& status, DaemonClient& client, std::ostream& err);

}  // namespace overlap::client
