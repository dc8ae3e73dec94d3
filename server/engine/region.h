// Byte regions of a buffer: one contiguous range, or `rows` runs of
// `row_bytes` bytes every `stride` bytes (a column block of a row-major
// matrix). The host backend's hazard checker tracks accesses as regions, and
// the GEMM checks every backend shares (gemm_checks.h) find an output that
// overlaps an input with them.
#pragma once

#include <cstdint>
#include <string>

namespace overlap::engine {

// `rows` runs of `row_bytes` bytes, `stride` bytes apart, from `offset`.
struct Region {
  uint64_t offset = 0;
  uint64_t row_bytes = 0;
  uint64_t stride = 0;
  uint64_t rows = 0;

  static Region Contiguous(uint64_t offset, uint64_t bytes);
  static Region Strided(uint64_t offset, uint64_t row_bytes, uint64_t stride, uint64_t rows);
  uint64_t begin() const { return offset; }
  uint64_t end() const { return rows == 0 ? offset : offset + (rows - 1) * stride + row_bytes; }
  bool contiguous() const { return rows <= 1; }
  bool empty() const { return rows == 0 || row_bytes == 0; }
  bool Overlaps(const Region& other) const;
  bool Covers(const Region& other) const;
  std::string ToString() const;
  bool operator==(const Region& o) const {
    return offset == o.offset && row_bytes == o.row_bytes && stride == o.stride && rows == o.rows;
  }
};

}  // namespace overlap::engine
