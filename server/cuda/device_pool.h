// The memory of one device, cudaMalloc'ed once at engine start and carved up by a
// RangeAllocator (jobs allocate and free often; cudaMalloc/cudaFree synchronise
// the device and would serialise the overlapped schedules).
//
// Frees are stream-ordered: FreeAfter() keeps the block until every given fence
// event has completed, so work still queued on any stream may keep using it.
// Allocate() reclaims completed frees first, and when still short waits for the
// pending ones before giving up with RESOURCE_EXHAUSTED.
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/cuda/cuda_resources.h"
#include "server/cuda/range_allocator.h"

namespace overlap::cuda {

class DevicePool {
 public:
  // Takes min(requested_bytes, 90% of the GPU's free memory / sharers), where
  // `sharers` counts the pools still to be made on the GPU, this one included
  // (ranks_per_gpu: each rank gets an equal share). percent_of_gpu > 0 asks
  // for that share of the GPU's whole memory instead of requested_bytes.
  static absl::StatusOr<std::unique_ptr<DevicePool>> Create(int device, int64_t requested_bytes,
                                                            int sharers = 1,
                                                            double percent_of_gpu = 0);

  // RESOURCE_EXHAUSTED naming the device, the request and the free bytes.
  absl::StatusOr<void*> Allocate(size_t bytes);
  // INVALID_ARGUMENT when `ptr` is not a live block of this pool.
  absl::Status Free(void* ptr);
  absl::Status FreeAfter(void* ptr, std::vector<CudaEvent> fences);

  int device() const { return device_; }
  size_t capacity() const { return capacity_; }
  size_t device_total_bytes() const { return device_total_bytes_; }  // the GPU's whole memory
  size_t BytesInUse() const;  // includes blocks whose fences have not completed
  // True when `ptr` .. `ptr + bytes` lies inside this pool's block.
  bool Contains(const void* ptr, size_t bytes) const;

 private:
  struct PendingFree {
    size_t offset;
    std::vector<CudaEvent> fences;
  };
  DevicePool(int device, DeviceMemory memory, size_t device_total_bytes);
  // Returns blocks whose fences completed (with `wait`, after waiting for them).
  // Const: reclaiming frees nothing that is still in use.
  void ReclaimLocked(bool wait) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int device_;
  DeviceMemory memory_;
  const size_t capacity_;
  const size_t device_total_bytes_;
  mutable absl::Mutex mu_;
  mutable RangeAllocator allocator_ ABSL_GUARDED_BY(mu_);
  mutable std::vector<PendingFree> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap::cuda
