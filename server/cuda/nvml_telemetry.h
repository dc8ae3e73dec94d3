// Live clocks, temperature, power, utilisation and health from NVML, loaded with dlopen
// at run time: overlapd must start on machines without a driver (CI), so it
// never links libnvidia-ml. Devices are matched by PCI bus id, because NVML and
// CUDA may number them differently. Thread-safe (NVML is).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/engine/engine.h"

namespace overlap::cuda {

class NvmlTelemetry {
 public:
  // Null when libnvidia-ml.so.1 or one of its symbols is missing, or nvmlInit
  // fails; the reason is logged once.
  static std::unique_ptr<NvmlTelemetry> Open(const std::vector<std::string>& pci_bus_ids);
  ~NvmlTelemetry();
  NvmlTelemetry(const NvmlTelemetry&) = delete;
  NvmlTelemetry& operator=(const NvmlTelemetry&) = delete;

  // Readings of CUDA device `device`; valid = false when NVML could not answer.
  engine::DeviceTelemetry Read(int device) const;

  struct Api;  // the resolved NVML entry points (nvml_telemetry.cc)

 private:
  NvmlTelemetry(void* library, std::unique_ptr<Api> api, std::vector<void*> handles);
  // The health fields of `t` from device handle `h`.
  void ReadHealth(void* h, engine::DeviceTelemetry* t) const;
  static constexpr unsigned int kMaxNvLinks = 18;  // NVML_NVLINK_MAX_LINKS
  void* library_;
  std::unique_ptr<Api> api_;
  std::vector<void*> handles_;  // nvmlDevice_t per CUDA device, null when not found
};

}  // namespace overlap::cuda
