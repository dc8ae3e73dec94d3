#include "server/engine/engine.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace overlap::engine {

std::vector<std::string> ClockLimitNames(uint64_t mask) {
  // NVML's nvmlClocksEventReason* bits.
  static constexpr std::pair<uint64_t, const char*> kReasons[] = {
      {0x4, "power"},       {0x20, "thermal"},     {0x8, "hw-slowdown"},
      {0x40, "hw-thermal"}, {0x80, "power-brake"}, {0x2, "app-clocks"},
      {0x10, "sync-boost"}, {0x100, "display"},    {0x1, "idle"}};
  std::vector<std::string> names;
  uint64_t known = 0;
  for (const auto& [bit, name] : kReasons) {
    known |= bit;
    if (mask & bit) names.push_back(name);
  }
  if (mask & ~known) names.push_back(absl::StrFormat("0x%x", mask & ~known));
  return names;
}

absl::Status CheckGemmScales(const GemmArgs& args) {
  const std::pair<const char*, const BufferRef*> scales[] = {{"a_scale", &args.a_scale},
                                                             {"b_scale", &args.b_scale}};
  for (const auto& [name, ref] : scales) {
    if (ref->buffer == kNoBuffer) continue;
    if (args.dtype != DType::kFP8) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "GEMM %s: per-tensor scales are for fp8 inputs, not %s", name, DTypeName(args.dtype)));
    }
    if (ref->bytes != sizeof(float) || ref->offset % kGemmScaleAlignment != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "GEMM %s: a scale is one fp32 (4 bytes) at an offset that is a multiple of %d, got "
          "%d bytes at offset %d",
          name, kGemmScaleAlignment, ref->bytes, ref->offset));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckElementwiseArgs(const ElementwiseArgs& args) {
  if (args.rows <= 0 || args.src_cols <= 0 ||
      (args.activation == Activation::kSwiglu && args.src_cols % 2 != 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Elementwise: %d x %d is not a shape %s takes", args.rows, args.src_cols,
                        ActivationName(args.activation)));
  }
  const double src_bytes = static_cast<double>(args.rows) * args.src_cols * DTypeSize(args.src_dtype);
  const double dst_bytes = static_cast<double>(args.rows) * args.DstCols() * DTypeSize(args.dst_dtype);
  if (static_cast<double>(args.src.bytes) != src_bytes ||
      static_cast<double>(args.dst.bytes) != dst_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Elementwise: %d x %d %s -> %s needs %.0f and %.0f bytes, got %d and %d", args.rows,
        args.src_cols, DTypeName(args.src_dtype), DTypeName(args.dst_dtype), src_bytes, dst_bytes,
        args.src.bytes, args.dst.bytes));
  }
  if (!(args.dst_scale > 0) || !std::isfinite(args.dst_scale)) {
    return absl::InvalidArgumentError("Elementwise: the scale must be finite and positive");
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> FirstNonFiniteOnHost(Engine& engine, BufferRef src, DType dtype,
                                             int device) {
  std::vector<uint8_t> host(src.bytes);
  RETURN_IF_ERROR(engine.CopyToHost(host.data(), src, device));
  const int64_t count = static_cast<int64_t>(src.bytes / DTypeSize(dtype));
  for (int64_t i = 0; i < count; ++i) {
    if (!std::isfinite(LoadAsFloat(host.data(), dtype, static_cast<size_t>(i)))) return i;
  }
  return -1;
}

}  // namespace overlap::engine
