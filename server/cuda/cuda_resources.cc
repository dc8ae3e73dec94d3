#include "server/cuda/cuda_resources.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "server/cuda/cuda_check.h"
#include "server/cuda/scoped_device.h"

namespace overlap::cuda {
namespace {

void LogReleaseError(const char* what, int device, cudaError_t error) noexcept {
  if (error == cudaSuccess) return;
  // Release can fail after a sticky error or during process teardown (the
  // driver is unloading); there is nothing to do but say so.
  if (IsStickyCudaError(error)) MarkStickyErrorSeen();
  GetLogger("cuda")->error("{} on device {} failed: {}: {}", what, device, cudaGetErrorName(error),
                           cudaGetErrorString(error));
}

}  // namespace

absl::StatusOr<CudaStream> CudaStream::Create(int device, int priority) {
  ScopedDevice guard(device);
  if (!guard.status().ok()) return guard.status();
  CudaStream stream;
  CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithPriority(&stream.stream_, cudaStreamNonBlocking, priority));
  stream.device_ = device;
  stream.priority_ = priority;
  return stream;
}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    Reset();
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = std::exchange(other.device_, -1);
    priority_ = other.priority_;
  }
  return *this;
}

void CudaStream::Reset() noexcept {
  if (stream_ == nullptr) return;
  ScopedDevice guard(device_);
  LogReleaseError("cudaStreamDestroy", device_, cudaStreamDestroy(stream_));
  stream_ = nullptr;
}

absl::StatusOr<CudaEvent> CudaEvent::Create(int device, bool timing) {
  ScopedDevice guard(device);
  if (!guard.status().ok()) return guard.status();
  CudaEvent event;
  if (timing) {
    CUDA_RETURN_IF_ERROR(cudaEventCreate(&event.event_));
  } else {
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event.event_, cudaEventDisableTiming));
  }
  event.device_ = device;
  return event;
}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    Reset();
    event_ = std::exchange(other.event_, nullptr);
    device_ = std::exchange(other.device_, -1);
  }
  return *this;
}

void CudaEvent::Reset() noexcept {
  if (event_ == nullptr) return;
  ScopedDevice guard(device_);
  LogReleaseError("cudaEventDestroy", device_, cudaEventDestroy(event_));
  event_ = nullptr;
}

absl::StatusOr<DeviceMemory> DeviceMemory::Allocate(int device, size_t bytes) {
  ScopedDevice guard(device);
  if (!guard.status().ok()) return guard.status();
  DeviceMemory memory;
  const cudaError_t error = cudaMalloc(&memory.ptr_, bytes);
  if (error != cudaSuccess) {
    const absl::Status status = CudaErrorToStatus(error, "cudaMalloc", __FILE__, __LINE__);
    return absl::Status(status.code(), absl::StrCat("allocating ", bytes, " bytes on device ",
                                                    device, ": ", status.message()));
  }
  memory.bytes_ = bytes;
  memory.device_ = device;
  return memory;
}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    Reset();
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = std::exchange(other.device_, -1);
  }
  return *this;
}

void DeviceMemory::Reset() noexcept {
  if (ptr_ == nullptr) return;
  ScopedDevice guard(device_);
  LogReleaseError("cudaFree", device_, cudaFree(ptr_));
  ptr_ = nullptr;
  bytes_ = 0;
}

}  // namespace overlap::cuda
