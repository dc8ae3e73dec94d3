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
