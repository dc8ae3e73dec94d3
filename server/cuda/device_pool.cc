#include "server/cuda/device_pool.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/cuda/cuda_check.h"
#include "server/cuda/scoped_device.h"

namespace overlap::cuda {
namespace {

constexpr size_t kPoolGranularity = size_t{2} << 20;

}  // namespace

absl::StatusOr<std::unique_ptr<DevicePool>> DevicePool::Create(int device, int64_t requested_bytes,
                                                               int sharers, double percent_of_gpu) {
  if (percent_of_gpu > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("pool_bytes_per_device: ", percent_of_gpu, "% is more than the whole GPU"));
  }
  if (requested_bytes <= 0 && percent_of_gpu <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pool_bytes_per_device must be positive, got ", requested_bytes));
  }
  ScopedDevice guard(device);
  if (!guard.status().ok()) return guard.status();
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (percent_of_gpu > 0) {
    requested_bytes = static_cast<int64_t>(static_cast<double>(total_bytes) * percent_of_gpu / 100);
  }
  const size_t share =
      free_bytes / 100 * kPoolMaxPercentOfFree / static_cast<size_t>(std::max(sharers, 1));
  const bool capped = share < static_cast<size_t>(requested_bytes);
  size_t bytes = std::min(static_cast<size_t>(requested_bytes), share);
  bytes = bytes / kPoolGranularity * kPoolGranularity;
  if (bytes == 0) {
    return absl::ResourceExhaustedError(absl::StrCat("device ", device, ": only ", free_bytes,
                                                     " bytes free, cannot create a memory pool"));
  }
  if (capped) {  // not when only rounded down to whole 2 MiB
    GetLogger("cuda")->warn(
        "device {}: pool capped to {} bytes ({}% of {} free, shared by {}), {} requested", device,
        bytes, kPoolMaxPercentOfFree, free_bytes, std::max(sharers, 1), requested_bytes);
  }
  ASSIGN_OR_RETURN(DeviceMemory memory, DeviceMemory::Allocate(device, bytes));
  return std::unique_ptr<DevicePool>(new DevicePool(device, std::move(memory), total_bytes));
}

DevicePool::DevicePool(int device, DeviceMemory memory, size_t device_total_bytes)
    : device_(device),
      memory_(std::move(memory)),
      capacity_(memory_.bytes()),
      device_total_bytes_(device_total_bytes),
      allocator_(memory_.bytes()) {}

void DevicePool::ReclaimLocked(bool wait) const {
  for (size_t i = 0; i < pending_.size();) {
    bool done = true;
    for (const CudaEvent& fence : pending_[i].fences) {
      ScopedDevice guard(fence.device());
      const cudaError_t error =
          wait ? cudaEventSynchronize(fence.get()) : cudaEventQuery(fence.get());
      if (error == cudaErrorNotReady) {
        done = false;
        break;
      }
      // Any other error means the context is gone: the memory is no longer in use.
      if (error != cudaSuccess && IsStickyCudaError(error)) MarkStickyErrorSeen();
    }
    if (!done) {
      ++i;
      continue;
    }
    allocator_.Free(pending_[i].offset).IgnoreError();
    pending_[i] = std::move(pending_.back());
    pending_.pop_back();
  }
}

absl::StatusOr<void*> DevicePool::Allocate(size_t bytes) {
  absl::MutexLock lock(&mu_);
  ReclaimLocked(/*wait=*/false);
  absl::StatusOr<size_t> offset = allocator_.Allocate(bytes);
  if (!offset.ok() && !pending_.empty()) {
    ReclaimLocked(/*wait=*/true);
    offset = allocator_.Allocate(bytes);
  }
  if (!offset.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("device ", device_, " out of pool memory: ", offset.status().message()));
  }
  return static_cast<char*>(memory_.get()) + *offset;
}

absl::Status DevicePool::Free(void* ptr) { return FreeAfter(ptr, {}); }

absl::Status DevicePool::FreeAfter(void* ptr, std::vector<CudaEvent> fences) {
  if (!Contains(ptr, 0)) {
    return absl::InvalidArgumentError(absl::StrCat("pointer ",
                                                   absl::Hex(reinterpret_cast<uintptr_t>(ptr)),
                                                   " is not in device ", device_, "'s pool"));
  }
  const size_t offset = static_cast<char*>(ptr) - static_cast<char*>(memory_.get());
  absl::MutexLock lock(&mu_);
  if (allocator_.BlockSize(offset) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("no live block at offset ", offset, " of device ", device_, "'s pool"));
  }
  for (const PendingFree& pending : pending_) {
    if (pending.offset == offset) {
      return absl::InvalidArgumentError(
          absl::StrCat("block at offset ", offset, " of device ", device_, "'s pool freed twice"));
    }
  }
  if (fences.empty()) return allocator_.Free(offset);
  pending_.push_back({offset, std::move(fences)});
  return absl::OkStatus();
}

size_t DevicePool::BytesInUse() const {
  absl::MutexLock lock(&mu_);
  ReclaimLocked(/*wait=*/false);
  return allocator_.bytes_in_use();
}

bool DevicePool::Contains(const void* ptr, size_t bytes) const {
  const char* base = static_cast<const char*>(memory_.get());
  const char* p = static_cast<const char*>(ptr);
  return p >= base && p <= base + capacity_ && bytes <= static_cast<size_t>(base + capacity_ - p);
}

}  // namespace overlap::cuda
