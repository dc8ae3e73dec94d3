#include "client/views/node_commands.h"

#include "client/core/proto_json.h"
#include "client/format/device_health.h"
#include "client/format/report.h"
#include "nlohmann/json.hpp"
#include "overlap_git_commit.h"

namespace overlap::client {

int NodeCommands::Fail(const absl::Status& status) {
  return ReportCallError(status, client_.address(), err_);
}

int NodeCommands::Node() {
  absl::StatusOr<v1::GetNodeInfoResponse> node = client_.GetNodeInfo();
  if (!node.ok()) return Fail(node.status());
  out_ << (json_ ? ToJson(*node) : FormatNodeInfo(*node));
  return kExitOk;
}

int NodeCommands::Health() {
  absl::StatusOr<v1::GetNodeInfoResponse> node = client_.GetNodeInfo();
  if (!node.ok()) return Fail(node.status());
  if (!HasHealth(*node)) {
    err_ << "overlapctl: health: no GPU health readings on this daemon (backend " << node->backend()
         << "; they come from NVML on the cuda backend)\n";
    return kExitRefused;
  }
  out_ << (json_ ? NodeHealthJson(*node).dump(1) + "\n" : FormatDeviceHealth(*node));
  return UnhealthyDevices(*node).empty() ? kExitOk : kExitJobFailed;
}

int NodeCommands::ForgetXids(int device) {
  absl::StatusOr<v1::ForgetXidsResponse> forgot = client_.ForgetXids(device);
  if (!forgot.ok()) return Fail(forgot.status());
  if (json_) {
    out_ << nlohmann::json{{"device", device}, {"forgotten", forgot->forgotten()}}.dump() << "\n";
  } else {
    out_ << "GPU " << device << ": forgot " << forgot->forgotten()
         << " Xid(s) of this boot; its count starts again from 0\n";
  }
  return kExitOk;
}

int NodeCommands::Stats() {
  absl::StatusOr<v1::GetStatsResponse> stats = client_.GetStats();
  if (!stats.ok()) return Fail(stats.status());
  out_ << (json_ ? ToJson(*stats) : FormatStats(*stats));
  return kExitOk;
}

int PrintVersions(DaemonClient& client, bool json, std::ostream& out) {
  absl::StatusOr<v1::GetNodeInfoResponse> node = client.GetNodeInfo();
  if (json) {
    nlohmann::json j = {
        {"overlapctl", {{"version", OVERLAP_VERSION}, {"commit", OVERLAP_GIT_COMMIT}}}};
    if (node.ok()) {
      j["overlapd"] = {{"version", node->overlapd_version()},
                       {"commit", node->git_commit()},
                       {"address", client.address()}};
    } else {
      j["overlapd"] = nullptr;
      j["overlapd_error"] = std::string(node.status().message());
    }
    out << j.dump(1) << "\n";
    return kExitOk;
  }
  out << "overlapctl " << OVERLAP_VERSION << " (" << OVERLAP_GIT_COMMIT << ")\n";
  if (node.ok()) {
    out << "overlapd " << node->overlapd_version() << " (" << node->git_commit() << ") at "
        << client.address() << "\n";
  } else {
    out << "overlapd: not asked: " << node.status().message() << " (at " << client.address()
        << ")\n";
  }
  return kExitOk;
}

}  // namespace overlap::client
