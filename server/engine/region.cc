#include "server/engine/region.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace overlap::engine {
namespace {

// Does any run of `r` intersect [x, x + len)?
bool RunsIntersect(const Region& r, uint64_t x, uint64_t len) {
  if (x >= r.end() || x + len <= r.begin()) return false;
  if (r.contiguous()) return true;
  // First run ending after x, last run starting before x + len.
  uint64_t lo = x < r.offset + r.row_bytes ? 0 : (x - r.offset - r.row_bytes) / r.stride + 1;
  uint64_t hi = x + len <= r.offset ? 0 : (x + len - r.offset - 1) / r.stride;
  hi = std::min(hi, r.rows - 1);
  return lo <= hi;
}

}  // namespace

Region Region::Contiguous(uint64_t offset, uint64_t bytes) {
  return Region{offset, bytes, bytes, bytes == 0 ? 0u : 1u};
}

Region Region::Strided(uint64_t offset, uint64_t row_bytes, uint64_t stride, uint64_t rows) {
  if (rows <= 1 || stride == row_bytes) return Contiguous(offset, row_bytes * rows);
  return Region{offset, row_bytes, stride, rows};
}

bool Region::Overlaps(const Region& other) const {
  if (empty() || other.empty()) return false;
  if (begin() >= other.end() || other.begin() >= end()) return false;
  if (contiguous() && other.contiguous()) return true;
  // Walk the runs of the region with fewer of them.
  const Region& few = rows <= other.rows ? *this : other;
  const Region& many = rows <= other.rows ? other : *this;
  for (uint64_t i = 0; i < few.rows; ++i) {
    if (RunsIntersect(many, few.offset + i * few.stride, few.row_bytes)) return true;
  }
  return false;
}

bool Region::Covers(const Region& other) const {
  if (other.empty() || *this == other) return true;
  return contiguous() && begin() <= other.begin() && other.end() <= end();
}

std::string Region::ToString() const {
  std::string s = absl::StrCat("[", begin(), ", ", end(), ")");
  if (!contiguous()) {
    absl::StrAppend(&s, " (", rows, " runs of ", row_bytes, " bytes every ", stride, ")");
  }
  return s;
}

}  // namespace overlap::engine
