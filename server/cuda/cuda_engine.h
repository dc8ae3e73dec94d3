// The CUDA/NCCL/cuBLASLt backend of engine::Engine: one process owning every
// visible GPU. This header carries no CUDA types, so code that only creates and
// uses the engine (overlapd, tests) needs no CUDA include paths.
//
// Per device the engine creates, once: StreamsPerRole() = 2 compute streams at
// the lowest priority and 2 comm streams at the highest; a memory pool of
// min(config.pool_bytes_per_device, 90% of free memory) from which buffers, one
// GEMM workspace per stream (config.gemm_workspace_bytes) and a barrier scratch
// are carved; one cuBLASLt handle. Peer access is enabled between every pair of
// devices that allows it. NCCL communicators are made on first use per (ordered
// device list, channel). NCCL_NVLS_ENABLE is forced to 0 unless config.nvls_enable.
//
// DeviceInfo::memory_bytes is what jobs may allocate (the pool less the
// workspaces); MemoryInUse counts job buffers only, including freed buffers whose
// last use is still queued on a stream.
//
// Synchronize is a watchdog: after config.collective_timeout_s, or on an NCCL
// async error, it aborts the communicators of the given devices (rebuilt on next
// use) and returns ABORTED. A sticky CUDA error makes Healthy() false for good.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "common/config.h"
#include "server/engine/engine.h"

namespace overlap::cuda {

class CudaEngine : public engine::EngineDefaults {
 public:
  virtual int MultiprocessorCount(int device) const = 0;
};

// UNAVAILABLE "no GPU visible: <cuda error>" when cudaGetDeviceCount fails or
// finds none; the first setup error of a device otherwise.
absl::StatusOr<std::unique_ptr<engine::Engine>> CreateCudaEngine(const DaemonConfig& config);
absl::StatusOr<std::unique_ptr<CudaEngine>> CreateCudaEngineTyped(const DaemonConfig& config);

}  // namespace overlap::cuda
