#include "client/format/device_health.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/format/table.h"
#include "common/xid.h"

namespace overlap::client {

bool HasHealth(const v1::Device& d) {
  return d.pcie_valid() || d.nvlink_valid() || d.ecc_valid() || d.row_remap_valid() ||
         d.xid_valid();
}

bool HasHealth(const v1::GetNodeInfoResponse& node) {
  for (const v1::Device& d : node.devices()) {
    if (HasHealth(d)) return true;
  }
  return false;
}

int MostNvlinksActive(const v1::GetNodeInfoResponse& node) {
  int most = 0;
  for (const v1::Device& d : node.devices()) {
    if (d.nvlink_valid()) most = std::max(most, d.nvlinks_active());
  }
  return most;
}

namespace {

// Each problem of `d` as a short tag (top's column) and the sentence that
// explains it.
struct Problem {
  const char* tag;
  std::string text;
};

std::vector<Problem> Problems(const v1::Device& d, int most_nvlinks_active) {
  std::vector<Problem> out;
  if (d.pcie_valid() && d.pcie_width() < d.pcie_max_width()) {
    out.push_back(
        {"pcie", absl::StrFormat("its PCIe link runs at x%d of x%d: host copies get %.0f%% "
                                 "of their bandwidth; reseat the GPU or check its riser",
                                 d.pcie_width(), d.pcie_max_width(),
                                 100.0 * d.pcie_width() / d.pcie_max_width())});
  }
  if (d.nvlink_valid() && d.nvlinks_active() < most_nvlinks_active) {
    out.push_back({"nvlink", absl::StrFormat("%d NVLinks up where the node's best GPU has %d: its "
                                             "peer copies and collectives lose bandwidth; "
                                             "`nvidia-smi nvlink -s -i %d` lists them",
                                             d.nvlinks_active(), most_nvlinks_active, d.index())});
  }
  if (d.ecc_valid() && d.ecc_uncorrected() > 0) {
    out.push_back({"ecc", absl::StrFormat("%d uncorrectable ECC error(s) since the driver loaded: "
                                          "results on it may be wrong; drain its jobs and reset "
                                          "the GPU",
                                          d.ecc_uncorrected())});
  }
  if (d.xid_valid() && d.gpu_xid_errors() > 0) {
    out.push_back(
        {"xid", absl::StrFormat("%d Xid error(s) that point at the GPU this boot (the "
                                "last Xid seen: %s): `dmesg | grep Xid` has each; drain "
                                "its jobs and reset the GPU, then `overlapctl health "
                                "--forget-xids %d`",
                                d.gpu_xid_errors(), DescribeXid(d.last_xid()), d.index())});
  }
  if (d.row_remap_valid() && d.row_remap_failed()) {
    out.push_back({"remap",
                   "a row remap failed: its memory has more bad rows than it can remap; "
                   "replace it"});
  } else if (d.row_remap_valid() && d.row_remap_pending()) {
    out.push_back(
        {"remap", "a row remap waits for a GPU reset: reset it to stop using the bad row"});
  }
  return out;
}

}  // namespace

std::vector<std::string> HealthProblems(const v1::Device& d, int most_nvlinks_active) {
  std::vector<std::string> out;
  for (Problem& p : Problems(d, most_nvlinks_active)) out.push_back(std::move(p.text));
  return out;
}

std::string HealthTags(const v1::Device& d, int most_nvlinks_active) {
  if (!HasHealth(d)) return "-";
  std::vector<std::string> tags;
  for (const Problem& p : Problems(d, most_nvlinks_active)) tags.push_back(p.tag);
  return tags.empty() ? "ok" : absl::StrJoin(tags, ",");
}

std::string NvlinkErrorsBetween(const v1::Device& before, const v1::Device& after,
                                const std::string& during) {
  if (!before.nvlink_valid() || !after.nvlink_valid()) return "";
  const int64_t crc = after.nvlink_crc_errors() - before.nvlink_crc_errors();
  const int64_t replay = after.nvlink_replay_errors() - before.nvlink_replay_errors();
  const int64_t recovery = after.nvlink_recovery_errors() - before.nvlink_recovery_errors();
  // Replays alone are the link doing its job under heavy traffic; CRC errors
  // and recoveries are a link going bad (what the NVLink alert watches too).
  if (crc <= 0 && recovery <= 0) return "";
  return absl::StrFormat("NVLink errors %s: %d CRC, %d replay, %d recovery", during,
                         std::max<int64_t>(crc, 0), std::max<int64_t>(replay, 0),
                         std::max<int64_t>(recovery, 0));
}

namespace {

std::string PcieCell(const v1::Device& d) {
  if (!d.pcie_valid()) return "-";
  // One word, so that awk splits the row: the link now, then its best.
  return absl::StrFormat("Gen%dx%d/Gen%dx%d", d.pcie_gen(), d.pcie_width(), d.pcie_max_gen(),
                         d.pcie_max_width());
}

std::string XidCell(const v1::Device& d) {
  if (!d.xid_valid()) return "-";
  if (d.xid_errors() == 0) return "0/0";
  return absl::StrCat(d.gpu_xid_errors(), "/", d.xid_errors());
}

std::string LastXidCell(const v1::Device& d) {
  return d.xid_valid() && d.xid_errors() > 0 ? absl::StrCat(d.last_xid()) : "-";
}

std::string RemapCell(const v1::Device& d) {
  if (!d.row_remap_valid()) return "-";
  if (d.row_remap_failed()) return "FAILED";
  return d.row_remap_pending() ? "pending" : "none";
}

}  // namespace

std::string FormatDeviceHealth(const v1::GetNodeInfoResponse& node) {
  if (!HasHealth(node)) return "";
  TextTable table(Columns(
      {Figures({"INDEX"}), Words({"PCIE_NOW/MAX"}),
       Figures({"PCIE_REPLAYS", "NVLINKS", "NVLINK_CRC/REPLAY/RECOVERY", "ECC_CORR/UNCORR"}),
       Words({"ROW_REMAP"}), Figures({"XID_GPU/ALL", "LAST_XID"})}));
  std::string problems;
  const int most = MostNvlinksActive(node);
  for (const v1::Device& d : node.devices()) {
    table.AddRow(
        {absl::StrCat(d.index()), PcieCell(d),
         d.pcie_valid() ? absl::StrCat(d.pcie_replays()) : "-",
         d.nvlink_valid() ? absl::StrCat(d.nvlinks_active(), "/", d.nvlinks_supported()) : "-",
         d.nvlink_valid() ? absl::StrCat(d.nvlink_crc_errors(), "/", d.nvlink_replay_errors(), "/",
                                         d.nvlink_recovery_errors())
                          : "-",
         d.ecc_valid() ? absl::StrCat(d.ecc_corrected(), "/", d.ecc_uncorrected()) : "-",
         RemapCell(d), XidCell(d), LastXidCell(d)});
    for (const std::string& p : HealthProblems(d, most)) {
      absl::StrAppend(&problems, "GPU ", d.index(), ": ", p, "\n");
    }
  }
  return absl::StrCat(
      "health (errors since the driver loaded; Xids this boot, kept across overlapd restarts):\n",
      table.Render(), problems.empty() ? "no health problems\n" : problems);
}

nlohmann::json HealthJson(const v1::Device& d) {
  if (!HasHealth(d)) return nullptr;
  nlohmann::json j = nlohmann::json::object();
  if (d.pcie_valid()) {
    j["pcie"] = {{"gen", d.pcie_gen()},
                 {"max_gen", d.pcie_max_gen()},
                 {"width", d.pcie_width()},
                 {"max_width", d.pcie_max_width()},
                 {"replays", d.pcie_replays()}};
  }
  if (d.nvlink_valid()) {
    j["nvlink"] = {{"active", d.nvlinks_active()},
                   {"supported", d.nvlinks_supported()},
                   {"crc_errors", d.nvlink_crc_errors()},
                   {"replay_errors", d.nvlink_replay_errors()},
                   {"recovery_errors", d.nvlink_recovery_errors()}};
  }
  if (d.ecc_valid()) {
    j["ecc"] = {{"corrected", d.ecc_corrected()}, {"uncorrected", d.ecc_uncorrected()}};
  }
  if (d.row_remap_valid()) {
    j["row_remap"] = {{"pending", d.row_remap_pending()}, {"failed", d.row_remap_failed()}};
  }
  if (d.xid_valid()) {
    j["xid"] = {{"errors", d.xid_errors()}, {"gpu_errors", d.gpu_xid_errors()}};
    if (d.xid_errors() > 0) {
      j["xid"]["last"] = d.last_xid();
      j["xid"]["last_unix_ms"] = d.last_xid_unix_ms();
    }
  }
  return j;
}

nlohmann::json NodeHealthJson(const v1::GetNodeInfoResponse& node) {
  nlohmann::json j = {{"devices", nlohmann::json::array()}};
  const int most = MostNvlinksActive(node);
  for (const v1::Device& d : node.devices()) {
    if (!HasHealth(d)) continue;
    j["devices"].push_back(
        {{"device", d.index()}, {"health", HealthJson(d)}, {"problems", HealthProblems(d, most)}});
  }
  j["unhealthy_gpus"] = UnhealthyDevices(node);
  return j;
}

std::vector<int> UnhealthyDevices(const v1::GetNodeInfoResponse& node) {
  std::vector<int> out;
  const int most = MostNvlinksActive(node);
  for (const v1::Device& d : node.devices()) {
    if (!HealthProblems(d, most).empty()) out.push_back(d.index());
  }
  return out;
}

}  // namespace overlap::client
