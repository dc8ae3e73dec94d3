// Live clocks, temperature, power, utilisation and health from NVML, loaded with dlopen
// at run time: overlapd must start on machines without a driver (CI), so it
// never links libnvidia-ml. Devices are matched by PCI bus id, because NVML and
// CUDA may number them differently. A thread waits for NVML's Xid events and
// counts them per GPU, in an XidLog where there is one, so that the counts
// survive the daemon's restarts. Thread-safe (NVML is).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/engine/engine.h"
#include "server/engine/xid_log.h"

namespace overlap::cuda {

class NvmlTelemetry {
 public:
  // Null when libnvidia-ml.so.1 or one of its symbols is missing, or nvmlInit
  // fails; the reason is logged once.
  // Xid counts start from what `xid_log` (may be null) kept for these GPUs.
  static std::unique_ptr<NvmlTelemetry> Open(const std::vector<std::string>& pci_bus_ids,
                                             std::unique_ptr<engine::XidLog> xid_log);
  ~NvmlTelemetry();
  NvmlTelemetry(const NvmlTelemetry&) = delete;
  NvmlTelemetry& operator=(const NvmlTelemetry&) = delete;

  // Readings of CUDA device `device`; valid = false when NVML could not answer.
  engine::DeviceTelemetry Read(int device) const;
  // CUDA device `device`'s energy counter (NVML's total energy consumption,
  // in joules since the driver loaded); UNIMPLEMENTED where NVML does not
  // support it (before Volta, some virtual GPUs).
  absl::StatusOr<double> EnergyJoules(int device) const;
  // How often that counter moves: measured at the first call per device by
  // polling it for up to kPeriodProbe (NVML does not say); zero where it did
  // not move twice in that time.
  absl::Duration EnergyCounterPeriod(int device) const;
  // NVML's index of CUDA device `device`'s GPU (dcgm-exporter's `gpu`), -1
  // where NVML does not know it.
  int Index(int device) const;
  // Sets CUDA device `device`'s Xid counts back to 0, in the log too; returns
  // how many Xids they held.
  absl::StatusOr<int64_t> ForgetXids(int device);

  struct Api;  // the resolved NVML entry points (nvml_telemetry.cc)

 private:
  NvmlTelemetry(void* library, std::unique_ptr<Api> api, std::vector<void*> handles,
                std::vector<std::string> pci_bus_ids, std::unique_ptr<engine::XidLog> xid_log);
  // The health fields of `t` from device handle `h`.
  void ReadHealth(void* h, engine::DeviceTelemetry* t) const;
  // The NVLink data bytes `h` sent and received (NVML field values, summed
  // over the links), where NVML counts them.
  void ReadNvLinkTraffic(void* h, engine::DeviceTelemetry* t) const;
  // Registers every GPU for Xid events and starts the thread that waits for
  // them; where NVML cannot (no event symbols, a VM that refuses), logs why and
  // leaves xid_valid false.
  void StartXidWatch();
  void WatchXids();
  static constexpr unsigned int kMaxNvLinks = 18;  // NVML_NVLINK_MAX_LINKS

  void* library_;
  std::unique_ptr<Api> api_;
  std::vector<void*> handles_;  // nvmlDevice_t per CUDA device, null when not found
  const std::vector<std::string> pci_bus_ids_;
  const std::unique_ptr<engine::XidLog> xid_log_;  // null: counts since the daemon started
  void* event_set_ = nullptr;                      // nvmlEventSet_t; null when not watching
  std::vector<bool> xid_registered_;
  std::atomic<bool> stop_{false};
  std::thread xid_thread_;
  static constexpr absl::Duration kPeriodProbe = absl::Milliseconds(600);
  mutable absl::Mutex period_mu_;
  // Per CUDA device, once probed.
  mutable std::vector<std::optional<absl::Duration>> energy_periods_ ABSL_GUARDED_BY(period_mu_);
  mutable absl::Mutex xid_mu_;
  std::vector<engine::XidCounts> xids_ ABSL_GUARDED_BY(xid_mu_);
};

}  // namespace overlap::cuda
