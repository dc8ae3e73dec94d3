// GPU health from the daemon's NVML readings (GetNodeInfo), as an SRE reads
// DCGM's health checks: a PCIe link trained below its best, an NVLink down or
// taking errors, uncorrectable ECC errors, row remaps, Xid errors that point at
// the GPU. `overlapctl node` shows
// the readings; `overlapctl check` adds what is wrong to its findings. Pure
// functions of the readings; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

// Whether NVML answered any health reading of `device`; of any device of `node`.
bool HasHealth(const v1::Device& device);
bool HasHealth(const v1::GetNodeInfoResponse& node);

// The most NVLinks up on any one GPU of `node` (0 without NVLink). A GPU with
// fewer is missing links; comparing with the node's best, not with how many
// the GPU has, leaves alone nodes built with fewer links cabled.
int MostNvlinksActive(const v1::GetNodeInfoResponse& node);

// What is wrong with `device` now, one sentence each with what to do about it;
// empty when nothing is (or NVML has no readings).
std::vector<std::string> HealthProblems(const v1::Device& device, int most_nvlinks_active);
// The same as top's short column: "ok", or the problems' tags ("pcie",
// "nvlink", "ecc", "xid", "remap") joined by commas; "-" without readings.
std::string HealthTags(const v1::Device& device, int most_nvlinks_active);

// NVLink errors that `after` counts beyond `before` (two readings of one GPU),
// e.g. "NVLink errors during the check: 12 CRC, 0 replay, 1 recovery"; "" when
// neither CRC errors nor recoveries grew (replays alone are not a fault).
std::string NvlinkErrorsBetween(const v1::Device& before, const v1::Device& after,
                                const std::string& during);

// `overlapctl node`'s health table and a line per problem ("GPU 2: ..."); ""
// when no device has health readings.
std::string FormatDeviceHealth(const v1::GetNodeInfoResponse& node);

// A device's health readings for JSON records (check); null without any.
nlohmann::json HealthJson(const v1::Device& device);

// `overlapctl health --json`: {"devices": [{"device", "health", "problems"}]
// for those with readings, "unhealthy_gpus": [...]}.
nlohmann::json NodeHealthJson(const v1::GetNodeInfoResponse& node);
// Devices of `node` with a problem, by index.
std::vector<int> UnhealthyDevices(const v1::GetNodeInfoResponse& node);

}  // namespace overlap::client
