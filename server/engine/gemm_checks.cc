#include "server/engine/gemm_checks.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace overlap::engine {
namespace {

// The operand's extent in elements, or INVALID_ARGUMENT.
absl::Status Measure(int batch, GemmOperand& op) {
  if (op.ref.ld < op.cols) {
    return absl::InvalidArgumentError(absl::StrCat("GEMM ", op.name, ": ld ", op.ref.ld,
                                                   " is less than its ", op.cols, " columns"));
  }
  if (op.stride < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GEMM ", op.name, ": negative batch stride ", op.stride));
  }
  const double extent = static_cast<double>(batch - 1) * op.stride +
                        static_cast<double>(op.rows - 1) * op.ref.ld + static_cast<double>(op.cols);
  if (extent > static_cast<double>(std::numeric_limits<int64_t>::max() / 16)) {
    return absl::InvalidArgumentError(absl::StrCat("GEMM ", op.name, ": extent overflows"));
  }
  op.extent = (batch - 1) * op.stride + (op.rows - 1) * op.ref.ld + op.cols;
  return absl::OkStatus();
}

bool AnyOverlap(const std::vector<Region>& x, const std::vector<Region>& y) {
  for (const Region& a : x) {
    for (const Region& b : y) {
      if (a.Overlaps(b)) return true;
    }
  }
  return false;
}

}  // namespace

std::vector<Region> GemmOperand::Regions(int batch) const {
  const uint64_t es = DTypeSize(dtype);
  const uint64_t ld_bytes = ref.ld * es;
  const uint64_t row_bytes = cols * es;
  if (batch == 1 || stride == 0)
    return {Region::Strided(ref.offset * es, row_bytes, ld_bytes, rows)};
  if (stride == rows * ref.ld) {  // the batches continue the same row pattern
    return {Region::Strided(ref.offset * es, row_bytes, ld_bytes, rows * batch)};
  }
  std::vector<Region> regions;
  for (int i = 0; i < batch; ++i) {
    regions.push_back(Region::Strided((ref.offset + i * stride) * es, row_bytes, ld_bytes, rows));
  }
  return regions;
}

absl::StatusOr<GemmOperands> CheckGemmArgs(const GemmArgs& g) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GEMM: m, n, k must be positive, got ", g.m, ", ", g.n, ", ", g.k));
  }
  if (g.batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("GEMM: batch must be >= 1, got ", g.batch));
  }
  RETURN_IF_ERROR(CheckGemmScales(g));
  // fp8 reads B stored [n, k] and writes bf16 (common/dtype.h).
  const bool b_transposed = WeightsStoredTransposed(g.dtype);
  const bool batched = g.batch > 1;
  GemmOperands ops{{"a", g.a, g.m, g.k, batched ? g.stride_a : 0, g.dtype},
                   {"b", g.b, b_transposed ? g.n : g.k, b_transposed ? g.k : g.n,
                    batched ? g.stride_b : 0, g.dtype},
                   {"c", g.c, g.m, g.n, batched ? g.stride_c : 0, GemmOutputDType(g.dtype)}};
  for (GemmOperand* op : {&ops.a, &ops.b, &ops.c}) RETURN_IF_ERROR(Measure(g.batch, *op));
  if (g.epilogue == Activation::kNone) return ops;
  if (g.epilogue != Activation::kGelu) {
    return absl::InvalidArgumentError(absl::StrCat("GEMM epilogue ", ActivationName(g.epilogue),
                                                   ": only gelu runs in a GEMM's epilogue"));
  }
  if (g.beta != 0.0f || batched || g.dtype == DType::kFP8 || g.c_on_peer) {
    return absl::InvalidArgumentError(
        "GEMM epilogue gelu: only with beta 0, one batch, no fp8 inputs and C on the GEMM's "
        "device");
  }
  ops.d = {"d", g.d, g.m, g.n, 0, GemmOutputDType(g.dtype)};
  RETURN_IF_ERROR(Measure(1, ops.d));
  return ops;
}

absl::Status CheckGemmOutput(const GemmArgs& g, const GemmOperands& ops) {
  if (g.batch > 1 && g.stride_c < (g.m - 1) * g.c.ld + g.n) {
    return absl::InvalidArgumentError(
        absl::StrCat("GEMM c: batch stride ", g.stride_c, " makes the batches of c overlap"));
  }
  const std::vector<Region> c = ops.c.Regions(g.batch);
  if ((g.c.buffer == g.a.buffer && AnyOverlap(c, ops.a.Regions(g.batch))) ||
      (g.c.buffer == g.b.buffer && AnyOverlap(c, ops.b.Regions(g.batch)))) {
    return absl::InvalidArgumentError("GEMM c: output overlaps an input");
  }
  if (!ops.has_d()) return absl::OkStatus();
  const std::vector<Region> d = ops.d.Regions(1);
  if ((g.d.buffer == g.a.buffer && AnyOverlap(d, ops.a.Regions(1))) ||
      (g.d.buffer == g.b.buffer && AnyOverlap(d, ops.b.Regions(1))) ||
      (g.d.buffer == g.c.buffer && AnyOverlap(d, c))) {
    return absl::InvalidArgumentError("GEMM d: the epilogue's output overlaps an operand");
  }
  return absl::OkStatus();
}

}  // namespace overlap::engine
