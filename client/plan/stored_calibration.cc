#include "client/plan/stored_calibration.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "client/core/command_io.h"

namespace overlap::client {

absl::StatusOr<planner::Calibration> LoadCalibration(DaemonClient& client, const std::string& file,
                                                     int tp, std::ostream& err) {
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read the calibration ", file));
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<planner::Calibration> c = planner::CalibrationFromJson(text.str());
    if (!c.ok()) return absl::InvalidArgumentError(absl::StrCat(file, ": ", c.status().message()));
    return c;
  }
  absl::StatusOr<v1::GetCalibrationResponse> stored = client.GetCalibration(tp);
  if (!stored.ok()) return stored.status();
  return planner::CalibrationFromJson(stored->calibration_json());
}

int ExitForCalibrationError(const absl::Status& status, DaemonClient& client, std::ostream& err) {
  if (status.code() == absl::StatusCode::kInvalidArgument ||
      (status.code() == absl::StatusCode::kNotFound &&
       status.message().find("cannot read") != std::string::npos)) {
    err << "overlapctl: " << status.message() << "\n";
    return kExitUsage;
  }
  return ReportCallError(status, client.address(), err);
}

}  // namespace overlap::client
