// Inputs and verification of one op: seeded random inputs (never zeros) and a
// float64 reference computed on the host from the same seeds.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "server/ops/op_context.h"

namespace overlap::ops {

// Seed of rank r's A (tensor 0) or W (tensor 1) for the op at `op_index`.
uint64_t InputSeed(uint64_t job_seed, int op_index, int tensor, int rank);

// Fills every rank's A and W (W scaled by 1/sqrt(k) so outputs stay O(1)).
absl::Status FillInputs(OpContext& ctx, uint64_t job_seed, int op_index);

// Poisons every rank's Y with NaN (enqueued on the compute streams).
absl::Status PoisonOutputs(OpContext& ctx);

struct Verification {
  double max_rel_error = 0;  // max|y - ref| / max|ref| over the checked rows
  int64_t rows_checked = 0;  // per rank
};

// Copies every rank's Y back, fails with FAILED_PRECONDITION naming the rank,
// row and column of the first element that is not finite (never written after
// poisoning), and compares rows against a float64 reference: every row when the
// op is small, else the first and last rows of every rank block and chunk
// boundary plus seeded random rows (at most `max_rows` per rank).
absl::StatusOr<Verification> VerifyOutputs(OpContext& ctx, uint64_t job_seed, int op_index,
                                           int max_rows = 48);

}  // namespace overlap::ops
