// OVERLAP_TEST_RANKS_PER_GPU=2 gives the GPU tests' engine two ranks per GPU
// (config ranks_per_gpu), so that their multi-rank cases run, against the same
// float64 references, on a machine with one GPU.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "absl/status/statusor.h"
#include "common/config.h"
#include "server/cuda/cuda_engine.h"

namespace overlap {

inline void ApplyTestRanksPerGpu(DaemonConfig* config) {
  if (const char* ranks = std::getenv("OVERLAP_TEST_RANKS_PER_GPU")) {
    config->ranks_per_gpu = std::atoi(ranks);
  }
}

// The GPU tests' engine: a buffer pool of `pool_bytes` per device and the
// ranks per GPU OVERLAP_TEST_RANKS_PER_GPU asks for; an error (no GPU
// visible) the test skips on.
inline absl::StatusOr<std::unique_ptr<engine::Engine>> CreateTestCudaEngine(int64_t pool_bytes) {
  DaemonConfig config;
  config.pool_bytes_per_device = pool_bytes;
  ApplyTestRanksPerGpu(&config);
  return cuda::CreateCudaEngine(config);
}

}  // namespace overlap
