#include "server/cuda/range_allocator.h"

#include <algorithm>
#include <iterator>
#include <limits>

#include "absl/strings/str_cat.h"

namespace overlap::cuda {

RangeAllocator::RangeAllocator(size_t capacity) : capacity_(capacity / kAlignment * kAlignment) {
  if (capacity_ > 0) free_.emplace(0, capacity_);
}

size_t RangeAllocator::RoundUp(size_t bytes) {
  if (bytes == 0) return kAlignment;
  if (bytes > std::numeric_limits<size_t>::max() - kAlignment) return 0;
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

absl::StatusOr<size_t> RangeAllocator::Allocate(size_t bytes) {
  const size_t size = RoundUp(bytes);
  auto best = free_.end();
  if (size != 0) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second >= size && (best == free_.end() || it->second < best->second)) {
        best = it;
        if (it->second == size) break;
      }
    }
  }
  if (best == free_.end()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("requested ", bytes, " bytes, ", bytes_free(), " of ", capacity_,
                     " bytes free (largest free block ", largest_free_block(), " bytes)"));
  }
  const size_t offset = best->first;
  const size_t remaining = best->second - size;
  free_.erase(best);
  if (remaining > 0) free_.emplace(offset + size, remaining);
  allocated_.emplace(offset, size);
  in_use_ += size;
  return offset;
}

absl::Status RangeAllocator::Free(size_t offset) {
  auto it = allocated_.find(offset);
  if (it == allocated_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("no allocated block at offset ", offset));
  }
  size_t start = offset;
  size_t size = it->second;
  allocated_.erase(it);
  in_use_ -= size;
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(start, size);
  return absl::OkStatus();
}

size_t RangeAllocator::largest_free_block() const {
  size_t largest = 0;
  for (const auto& [offset, size] : free_) largest = std::max(largest, size);
  return largest;
}

size_t RangeAllocator::BlockSize(size_t offset) const {
  auto it = allocated_.find(offset);
  return it == allocated_.end() ? 0 : it->second;
}

}  // namespace overlap::cuda
