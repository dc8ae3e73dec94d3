// Move-only owners of CUDA objects: a stream, an event and a cudaMalloc'ed block.
// Each is built by a static factory (setup can fail) and remembers its device so
// that its noexcept destructor can release it from any thread; release errors are
// logged, never thrown.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

namespace overlap::cuda {

// Runs `release` with `device` current and logs its error, naming `what`.
void ReleaseOnDevice(const char* what, int device,
                     absl::FunctionRef<cudaError_t()> release) noexcept;

// One CUDA object and the device it was made on, released there by
// `kRelease` (named `kReleaseName` in the log) when its owner goes. Moving
// hands both over and leaves the source empty.
template <typename Handle, cudaError_t (*kRelease)(Handle), const char* kReleaseName>
class DeviceHandle {
 public:
  DeviceHandle() = default;
  DeviceHandle(Handle handle, int device) : handle_(handle), device_(device) {}
  DeviceHandle(DeviceHandle&& other) noexcept { *this = std::move(other); }
  DeviceHandle& operator=(DeviceHandle&& other) noexcept {
    if (this != &other) {
      Reset();
      handle_ = std::exchange(other.handle_, nullptr);
      device_ = std::exchange(other.device_, -1);
    }
    return *this;
  }
  ~DeviceHandle() { Reset(); }

  Handle get() const { return handle_; }
  int device() const { return device_; }

 private:
  void Reset() noexcept {
    if (handle_ == nullptr) return;
    ReleaseOnDevice(kReleaseName, device_, [this] { return kRelease(handle_); });
    handle_ = nullptr;
  }

  Handle handle_ = nullptr;
  int device_ = -1;
};

inline constexpr char kStreamDestroy[] = "cudaStreamDestroy";
inline constexpr char kEventDestroy[] = "cudaEventDestroy";
inline constexpr char kFree[] = "cudaFree";

class CudaStream {
 public:
  // Non-blocking stream with `priority` (lower number = higher priority).
  static absl::StatusOr<CudaStream> Create(int device, int priority);

  cudaStream_t get() const { return stream_.get(); }
  int device() const { return stream_.device(); }
  int priority() const { return priority_; }

 private:
  DeviceHandle<cudaStream_t, cudaStreamDestroy, kStreamDestroy> stream_;
  int priority_ = 0;
};

class CudaEvent {
 public:
  static absl::StatusOr<CudaEvent> Create(int device, bool timing);

  cudaEvent_t get() const { return event_.get(); }
  int device() const { return event_.device(); }

 private:
  DeviceHandle<cudaEvent_t, cudaEventDestroy, kEventDestroy> event_;
};

class DeviceMemory {
 public:
  static absl::StatusOr<DeviceMemory> Allocate(int device, size_t bytes);
  DeviceMemory() = default;
  DeviceMemory(DeviceMemory&& other) noexcept
      : memory_(std::move(other.memory_)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceMemory& operator=(DeviceMemory&& other) noexcept {
    memory_ = std::move(other.memory_);
    bytes_ = std::exchange(other.bytes_, 0);
    return *this;
  }

  void* get() const { return memory_.get(); }
  size_t bytes() const { return bytes_; }
  int device() const { return memory_.device(); }

 private:
  DeviceHandle<void*, cudaFree, kFree> memory_;
  size_t bytes_ = 0;
};

}  // namespace overlap::cuda
