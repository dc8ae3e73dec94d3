// Move-only owners of CUDA objects: a stream, an event and a cudaMalloc'ed block.
// Each is built by a static factory (setup can fail) and remembers its device so
// that its noexcept destructor can release it from any thread; release errors are
// logged, never thrown.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "absl/status/statusor.h"

namespace overlap::cuda {

class CudaStream {
 public:
  // Non-blocking stream with `priority` (lower number = higher priority).
  static absl::StatusOr<CudaStream> Create(int device, int priority);
  CudaStream() = default;
  CudaStream(CudaStream&& other) noexcept { *this = std::move(other); }
  CudaStream& operator=(CudaStream&& other) noexcept;
  ~CudaStream() { Reset(); }

  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }
  int priority() const { return priority_; }

 private:
  void Reset() noexcept;
  cudaStream_t stream_ = nullptr;
  int device_ = -1;
  int priority_ = 0;
};

class CudaEvent {
 public:
  static absl::StatusOr<CudaEvent> Create(int device, bool timing);
  CudaEvent() = default;
  CudaEvent(CudaEvent&& other) noexcept { *this = std::move(other); }
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  ~CudaEvent() { Reset(); }

  cudaEvent_t get() const { return event_; }
  int device() const { return device_; }

 private:
  void Reset() noexcept;
  cudaEvent_t event_ = nullptr;
  int device_ = -1;
};

class DeviceMemory {
 public:
  static absl::StatusOr<DeviceMemory> Allocate(int device, size_t bytes);
  DeviceMemory() = default;
  DeviceMemory(DeviceMemory&& other) noexcept { *this = std::move(other); }
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  ~DeviceMemory() { Reset(); }

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  int device() const { return device_; }

 private:
  void Reset() noexcept;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  int device_ = -1;
};

}  // namespace overlap::cuda
