// A GPU's names as NVML and dcgm-exporter write them, from what CUDA reports,
// so that overlapd's metrics join dcgm-exporter's (labels UUID, pci_bus_id).
#pragma once

#include <cstdint>
#include <string>

namespace overlap::engine {

// CUDA's 16-byte device UUID as NVML prints it: "GPU-" then 8-4-4-4-12 hex.
std::string FormatGpuUuid(const char (&bytes)[16]);

// cudaDeviceGetPCIBusId's "0000:19:00.0" in NVML's form "00000000:19:00.0"
// (the domain widened to 8 hex digits, upper case). Anything it cannot read is
// returned as given.
std::string NvmlPciBusId(const std::string& cuda_form);

}  // namespace overlap::engine
