// RAII guard: makes `device` current for the calling thread and puts the previous
// device back on destruction (Triton's ScopedSetDevice). Every engine method that
// touches a GPU holds one, so callers never see the current device change.
#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "server/cuda/cuda_check.h"

namespace overlap::cuda {

class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ == device) return;
    const cudaError_t error = cudaSetDevice(device);
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
