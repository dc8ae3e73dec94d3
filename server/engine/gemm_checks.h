// The checks of a GEMM's arguments that need no backend state, written once
// for every backend: positive dims, a batch of at least 1, each operand's ld
// at least its columns, non-negative batch strides, extents that fit in 64
// bits, the fp8 scales (CheckGemmScales), C's batches apart, and C not
// overlapping A or B where they share a buffer. A backend checks in between
// what it alone knows: that each buffer exists, lives on the right device and
// holds the operand's extent.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "server/engine/engine.h"
#include "server/engine/region.h"

namespace overlap::engine {

// One operand as the GEMM reads or writes it.
struct GemmOperand {
  const char* name;  // "a" | "b" | "c"
  MatrixRef ref;
  int64_t rows = 0, cols = 0;
  int64_t stride = 0;  // between batches, in elements (0 with one batch)
  DType dtype = DType::kBF16;
  // Elements from ref.offset to one past the last element touched.
  int64_t extent = 0;
  // The bytes it touches, from its buffer's start.
  std::vector<Region> Regions(int batch) const;
};

struct GemmOperands {
  GemmOperand a, b, c;
  GemmOperand d;  // the epilogue's output (GemmArgs::epilogue); extent 0 without one
  bool has_d() const { return d.extent > 0; }
};

// The operands' shapes and extents. INVALID_ARGUMENT naming the operand and
// what is wrong ("GEMM c: ld 1 is less than its 2 columns").
absl::StatusOr<GemmOperands> CheckGemmArgs(const GemmArgs& args);

// C's batches do not overlap each other, and C does not overlap A or B where
// it shares their buffer ("GEMM c: output overlaps an input"); nor does an
// epilogue's D overlap A, B or C. After
// CheckGemmArgs, and after the backend found the operands inside their buffers.
absl::Status CheckGemmOutput(const GemmArgs& args, const GemmOperands& operands);

}  // namespace overlap::engine
