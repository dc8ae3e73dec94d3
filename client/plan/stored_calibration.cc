#include "client/plan/stored_calibration.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "client/core/command_io.h"

namespace overlap::client {

absl::StatusOr<planner::Calibration> LoadCalibration(DaemonClient& client, const std::string& file,
                                                     int tp, std::ostream& err) {
  if (!file.empty()) {
    absl::StatusOr<std::string> text = ReadBoundedFile(file, kMaxInputFileBytes);
    if (!text.ok()) {
      return absl::Status(text.status().code(),
                          absl::StrCat("the calibration: ", text.status().message()));
    }
    absl::StatusOr<planner::Calibration> c = planner::CalibrationFromJson(*text);
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
       status.message().find("cannot read") != std::string::npos) ||
      (status.code() == absl::StatusCode::kDataLoss &&
       status.message().find("error reading") != std::string::npos)) {
    err << "overlapctl: " << status.message() << "\n";
    return kExitUsage;
  }
  return ReportCallError(status, client.address(), err);
}

}  // namespace overlap::client
