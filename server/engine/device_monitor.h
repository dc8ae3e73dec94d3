// DeviceMonitor: the live state of the devices a backend owns (memory in use,
// NVML's readings, Xid counts, whether the context still works), the part of
// a backend that node/ and rpc/ read for GetNodeInfo, health and metrics, and
// that no schedule needs. Engines that run on devices they do not own (a
// job's spanning engine, the runner's timeline recorder) have none: their
// Engine::Monitor() is null, or their wrapped engine's.
//
// Thread safety: every call may come from any thread, beside running work.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace overlap::engine {

// Live readings of one device (NVML on the CUDA backend); valid is false where
// the backend has none (the host backend, a machine without libnvidia-ml).
struct DeviceTelemetry {
  bool valid = false;
  int sm_clock_mhz = 0;
  int mem_clock_mhz = 0;
  int temperature_c = 0;
  double power_w = 0;
  int utilization_pct = 0;   // percent of the last sample period a kernel ran
  int max_sm_clock_mhz = 0;  // 0 = unknown
  // What holds the clocks back now (NVML's clocks event reasons, ClockLimitNames).
  bool clock_limits_valid = false;
  uint64_t clock_limits = 0;
  // Time the clocks were held below their application clocks by the power
  // limit and by heat, cumulative since the driver loaded (NVML violation
  // counters, as DCGM's power and thermal violation fields): sampled twice,
  // their difference over the time between says how much of it was capped.
  bool capped_time_valid = false;
  double power_capped_s = 0;
  double thermal_capped_s = 0;
  // Health, as DCGM's checks read it: a PCIe link trained below its best, an
  // NVLink down or taking errors, uncorrectable ECC errors and row remaps.
  // Each group is valid only where NVML answers it (no NVLink on a PCIe card,
  // no ECC counts with ECC off). Counters are cumulative since the driver loaded.
  bool pcie_valid = false;
  int pcie_gen = 0, pcie_max_gen = 0;  // the current gen drops at idle to save power
  int pcie_width = 0, pcie_max_width = 0;
  int64_t pcie_replays = 0;
  bool nvlink_valid = false;
  int nvlinks_active = 0;
  int nvlinks_supported = 0;      // links that report a state
  int64_t nvlink_crc_errors = 0;  // flit and data CRC, summed over the links
  int64_t nvlink_replay_errors = 0;
  int64_t nvlink_recovery_errors = 0;
  bool ecc_valid = false;
  int64_t ecc_corrected = 0;  // volatile counts
  int64_t ecc_uncorrected = 0;
  bool row_remap_valid = false;
  bool row_remap_pending = false;  // applied at the next GPU reset
  bool row_remap_failed = false;
  // Xid errors (NVML events) this boot, kept across the daemon's restarts where
  // it has a state directory (xid_log.h); xid_valid where NVML lets it watch them.
  bool xid_valid = false;
  int64_t xid_errors = 0;
  int64_t gpu_xid_errors = 0;  // those that point at the GPU (common/xid.h)
  uint64_t last_xid = 0;
  int64_t last_xid_unix_ms = 0;
  // Energy the GPU drew since the driver loaded (NVML's total energy
  // consumption, Volta and later), and the bytes its NVLinks sent and received
  // since then (NVML field values): read twice, their differences over the
  // time between give power and NVLink throughput.
  bool energy_valid = false;
  double energy_j = 0;
  bool nvlink_traffic_valid = false;
  int64_t nvlink_tx_bytes = 0;
  int64_t nvlink_rx_bytes = 0;
};

// The names of the reasons set in NVML's clocks event reasons `mask`, most
// telling first: "power" (software power cap), "thermal" (software thermal
// slowdown), "hw-slowdown", "hw-thermal", "power-brake", "app-clocks",
// "sync-boost", "display", "idle", and "0x..." for bits NVML may add later.
std::vector<std::string> ClockLimitNames(uint64_t mask);

class DeviceMonitor {
 public:
  virtual ~DeviceMonitor() = default;

  virtual int64_t MemoryInUse(int device) const = 0;
  virtual DeviceTelemetry Telemetry(int device) const = 0;
  // Sets `device`'s Xid counts back to 0 (after the GPU was reset) and returns
  // how many Xids they held; FAILED_PRECONDITION where the backend counts none.
  // const like Telemetry: the counts are the health readings' bookkeeping, not
  // state any job sees.
  virtual absl::StatusOr<int64_t> ForgetXids(int device) const = 0;
  // False once a device hit a sticky error (the context is lost): the daemon
  // reports NOT_SERVING and exits so that systemd restarts it.
  virtual bool Healthy() const = 0;
  // `device`'s energy counter in joules (cumulative, only its differences
  // mean anything), read without the rest of Telemetry so that the runner can
  // read it around each timed phase. UNIMPLEMENTED where the backend has none
  // (NVML absent, a GPU older than Volta); the host backend's is simulated
  // (HostEngineOptions::simulated_power_w).
  virtual absl::StatusOr<double> EnergyJoules(int device) const {
    (void)device;
    return absl::UnimplementedError("this backend has no energy counter");
  }
  // How often `device`'s energy counter moves (zero where it moves with every
  // read, as the host backend's does): a window of a few periods or less reads
  // coarse, whatever ran in it.
  virtual absl::Duration EnergyCounterPeriod(int device) const {
    (void)device;
    return absl::ZeroDuration();
  }
};

}  // namespace overlap::engine
