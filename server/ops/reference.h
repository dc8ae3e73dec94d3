// Inputs and verification of one op: seeded random inputs (never zeros) and a
// float64 reference computed on the host from the same seeds.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/ops/op_context.h"

namespace overlap::ops {

// The key an op's seeded inputs are drawn by: its id, so that rewriting a
// graph around it (ops added, removed or fused) changes none of its data.
uint64_t InputKeyOf(absl::string_view op_id);

// The keys of an op's A and W: InputKeyOf its id, or of the ids its data came
// from (OpSpec::a_seed_id, w_seed_id: an op the overlap pass fused). A single
// key stands for both.
struct InputKeys {
  InputKeys(uint64_t key) : a(key), w(key) {}  // NOLINT: one key for both tensors
  InputKeys(uint64_t a_key, uint64_t w_key) : a(a_key), w(w_key) {}
  uint64_t a, w;
};
InputKeys InputKeysOf(const OpSpec& op);
InputKeys GroupInputKeys(InputKeys keys, int group);

// Seed of rank r's A (tensor 0) or W (tensor 1) for the op keyed `input_key`.
uint64_t InputSeed(uint64_t job_seed, uint64_t input_key, int tensor, int rank);
// The key group `group` of a mesh op draws its inputs by: a replica's data
// differ from another's, as a data-parallel batch does. Group 0's is the op's.
uint64_t GroupInputKey(uint64_t input_key, int group);

// `value` rounded as a buffer of `dtype` holds it.
double RoundAsStored(DType dtype, double value);

// Input element `index` of a tensor drawn by `seed`, as the device holds it:
// SeededUniform(seed, index) * fill rounded to `dtype`.
double InputValue(DType dtype, uint64_t seed, uint64_t index, float fill);

// Which of `count` rows (or columns) a check reads: all of them when `all` or
// when there are at most `max_picked`, else the first and last of 16 blocks
// (rank blocks and chunk boundaries), the last one, and seeded random ones,
// `max_picked` in all, ascending.
std::vector<int64_t> IndicesToCheck(int64_t count, bool all, int max_picked, uint64_t seed);

// How an op's GEMM inputs are made: element i of A holds SeededUniform(seed, i)
// * fill_a rounded to A's dtype, and stands for that times dequant_a (W alike).
// W stands for values scaled by 1/sqrt(k), so that outputs stay O(1). fp8
// inputs span E4M3's range (+-448) and carry the rest in their per-tensor
// scales, as a model's fp8 tensors do: at a fixed scale of 1 most of W would be
// subnormal in E4M3.
struct InputScaling {
  float fill_a = 1, fill_w = 1;
  float dequant_a = 1, dequant_w = 1;
};
InputScaling InputScalingFor(const OpSpec& op, DType dtype);

// Fills every rank's A and W as InputScalingFor says, and an fp8 op's scales.
absl::Status FillInputs(OpContext& ctx, uint64_t job_seed, InputKeys keys);

// Poisons every rank's Y with NaN (enqueued on the compute streams).
absl::Status PoisonOutputs(OpContext& ctx);

struct Verification {
  double max_rel_error = 0;  // max|y - ref| / max|ref| over the checked elements
  int64_t rows_checked = 0;  // per rank
  int64_t cols_checked = 0;  // in each checked row
};

// Fails with FAILED_PRECONDITION naming the rank, row and column of the first
// element of Y that is not finite (never written after poisoning; the backend
// scans it where it lives), then copies the checked rows back and compares
// elements against a float64 reference. Rows: every
// row when the op is small, else the first and last rows of every rank block
// and chunk boundary plus seeded random rows (at most `max_rows` per rank).
// Columns, in each checked row: every column when a row's reference is cheap
// (y_cols x k <= 2^22 multiply-adds), else the first and last of 16 column
// blocks plus seeded random ones (at most `max_cols`). The schedules split
// rows, never columns, so a misplaced piece or a missing sum shows in every
// column; a full row of a large op cost its whole W regenerated on the host,
// which left the GPUs idle for a second or more after each op.
absl::StatusOr<Verification> VerifyOutputs(OpContext& ctx, uint64_t job_seed, InputKeys keys,
                                           int max_rows = 48, int max_cols = 256);

// What VerifyOutputs' error may reach for an op of `type` over `tp` ranks:
// DTypeTolerance, widened for the ops whose output sums the ranks' partials.
double OutputTolerance(OpType type, DType dtype, int tp);

}  // namespace overlap::ops
