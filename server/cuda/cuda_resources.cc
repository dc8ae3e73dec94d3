#include "server/cuda/cuda_resources.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "server/cuda/cuda_check.h"
#include "server/cuda/scoped_device.h"

namespace overlap::cuda {

void ReleaseOnDevice(const char* what, int device,
                     absl::FunctionRef<cudaError_t()> release) noexcept {
  ScopedDevice guard(device);
  const cudaError_t error = release();
  if (error == cudaSuccess) return;
  // Release can fail after a sticky error or during process teardown (the
  // driver is unloading); there is nothing to do but say so.
  if (IsStickyCudaError(error)) MarkStickyErrorSeen();
  GetLogger("cuda")->error("{} on device {} failed: {}: {}", what, device, cudaGetErrorName(error),
                           cudaGetErrorString(error));
}

absl::StatusOr<CudaStream> CudaStream::Create(int device, int priority) {
  ScopedDevice guard(device);
  if (!guard.status().ok()) return guard.status();
  cudaStream_t raw = nullptr;
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(&raw, cudaStreamNonBlocking, priority));
  CudaStream stream;
  stream.stream_ = {raw, device};
  stream.priority_ = priority;
  return stream;
}

absl::StatusOr<CudaEvent> CudaEvent::Create(int device, bool timing) {
  ScopedDevice guard(device);
  if (!guard.status().ok()) return guard.status();
  cudaEvent_t raw = nullptr;
  if (timing) {
    CUDA_RETURN_IF_ERROR(cudaEventCreate(&raw));
  } else {
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&raw, cudaEventDisableTiming));
  }
  CudaEvent event;
  event.event_ = {raw, device};
  return event;
}

absl::StatusOr<DeviceMemory> DeviceMemory::Allocate(int device, size_t bytes) {
  ScopedDevice guard(device);
  if (!guard.status().ok()) return guard.status();
  void* raw = nullptr;
  const cudaError_t error = cudaMalloc(&raw, bytes);
  if (error != cudaSuccess) {
    const absl::Status status = CudaErrorToStatus(error, "cudaMalloc", __FILE__, __LINE__);
    return absl::Status(status.code(), absl::StrCat("allocating ", bytes, " bytes on device ",
                                                    device, ": ", status.message()));
  }
  DeviceMemory memory;
  memory.memory_ = {raw, device};
  memory.bytes_ = bytes;
  return memory;
}

}  // namespace overlap::cuda
