// Sub-allocator over one contiguous range [0, capacity): best fit over a free list
// ordered by offset, 256-byte aligned sizes, neighbours coalesced on free. Pure
// host bookkeeping (no CUDA), so it is unit-tested without a GPU.
//
// Thread safety: none; DevicePool serialises access.
#pragma once

#include <cstddef>
#include <map>

#include "absl/status/statusor.h"

namespace overlap::cuda {

class RangeAllocator {
 public:
  static constexpr size_t kAlignment = 256;

  explicit RangeAllocator(size_t capacity);

  // Offset of a new block of at least `bytes` (0 bytes gets one aligned unit).
  // RESOURCE_EXHAUSTED when no free block is large enough.
  absl::StatusOr<size_t> Allocate(size_t bytes);
  // INVALID_ARGUMENT unless `offset` is the start of a live block.
  absl::Status Free(size_t offset);

  size_t capacity() const { return capacity_; }
  size_t bytes_in_use() const { return in_use_; }
  size_t bytes_free() const { return capacity_ - in_use_; }
  size_t largest_free_block() const;
  size_t free_block_count() const { return free_.size(); }
  // Size of the live block at `offset`, 0 when none.
  size_t BlockSize(size_t offset) const;

  static size_t RoundUp(size_t bytes);

 private:
  size_t capacity_;
  size_t in_use_ = 0;
  std::map<size_t, size_t> free_;       // offset -> size
  std::map<size_t, size_t> allocated_;  // offset -> size
};

}  // namespace overlap::cuda
