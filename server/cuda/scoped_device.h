// RAII guard: makes `device` current for the calling thread and puts the previous
// device back on destruction (Triton's ScopedSetDevice). Every engine method that
// touches a GPU holds one, so callers never see the current device change.
//
// Devices here are the engine's rank devices. With config ranks_per_gpu > 1
// several ranks share one GPU: rank device d runs on GPU d / ranks_per_gpu.
// The engine sets the ratio once when it is created (one CUDA engine per
// process at a time); every CUDA call that names a device goes through GpuOf.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>

#include "absl/status/status.h"
#include "server/cuda/cuda_check.h"

namespace overlap::cuda {

inline std::atomic<int>& RanksPerGpu() {
  static std::atomic<int> ranks{1};
  return ranks;
}
inline void SetRanksPerGpu(int ranks) { RanksPerGpu().store(ranks < 1 ? 1 : ranks); }
inline int GpuOf(int device) { return device < 0 ? device : device / RanksPerGpu().load(); }

class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    const int gpu = GpuOf(device);
    if (previous_ == gpu) return;
    const cudaError_t error = cudaSetDevice(gpu);
    status_ = error == cudaSuccess ? absl::OkStatus()
                                   : CudaErrorToStatus(error, "cudaSetDevice", __FILE__, __LINE__);
    switched_ = error == cudaSuccess && previous_ >= 0;
  }
  ~ScopedDevice() {
    if (switched_) cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

  // Not OK when the device could not be made current; check it before any work.
  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  bool switched_ = false;
  absl::Status status_;
};

}  // namespace overlap::cuda
