#include "common/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/enum_names.h"
#include "common/seeded_random.h"

namespace overlap {
namespace {

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float BitsFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kFP8:
      return 1;
  }
  return 0;
}

std::string DTypeName(DType dtype) {
  static constexpr EnumName<DType> kNames[] = {
      {DType::kF32, "fp32"}, {DType::kF16, "fp16"}, {DType::kBF16, "bf16"}, {DType::kFP8, "fp8"}};
  return NameOf(kNames, dtype);
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "fp32" || lower == "f32" || lower == "float32") return DType::kF32;
  if (lower == "fp16" || lower == "f16" || lower == "float16" || lower == "half") {
    return DType::kF16;
  }
  if (lower == "bf16" || lower == "bfloat16") return DType::kBF16;
  if (lower == "fp8" || lower == "e4m3" || lower == "fp8_e4m3") return DType::kFP8;
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype \"", absl::CHexEscape(name),
                                                 "\" (expected fp32, fp16, bf16, fp8)"));
}

double DTypeTolerance(DType dtype, int summed_ranks) {
  double base = 0, unit_roundoff = 0;  // 2^-(significand bits)
  switch (dtype) {
    case DType::kF32:
      base = 1e-4;
      unit_roundoff = std::ldexp(1.0, -24);
      break;
    case DType::kF16:
      base = 5e-3;
      unit_roundoff = std::ldexp(1.0, -11);
      break;
    case DType::kBF16:
    case DType::kFP8:
      base = 1e-2;
      unit_roundoff = std::ldexp(1.0, -8);
      break;
  }
  return std::max(base, summed_ranks * unit_roundoff);
}

DType GemmOutputDType(DType input) { return input == DType::kFP8 ? DType::kBF16 : input; }

bool WeightsStoredTransposed(DType input) { return input == DType::kFP8; }

float Bf16ToFloat(uint16_t bits) { return BitsFloat(static_cast<uint32_t>(bits) << 16); }

uint16_t FloatToBf16(float value) {
  const uint32_t bits = FloatBits(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
    // NaN: keep sign and top payload bits, force the quiet bit so truncation
    // can never turn it into an infinity.
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  // Round to nearest even; a carry out of the mantissa correctly bumps the
  // exponent, and the largest finite values round up to infinity.
  const uint32_t rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

float Fp16ToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) return BitsFloat(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0) return BitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return BitsFloat(sign);
  // Subnormal: mantissa * 2^-24 is exact in float.
  const float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
  return sign ? -magnitude : magnitude;
}

uint16_t FloatToFp16(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) {
    return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));  // quiet NaN
  }
  // 65520 = 0x477FF000 is the tie between 65504 (odd mantissa) and 2^16: it and
  // everything above round to infinity.
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (abs < 0x38800000u) {
    // Result is subnormal (or rounds up to the smallest normal) in units of 2^-24.
    const uint32_t exponent = abs >> 23;
    const uint32_t significand = (abs & 0x7FFFFFu) | (exponent ? 0x800000u : 0u);
    const uint32_t shift = exponent ? 126 - exponent : 125;  // float subnormals: 2^-149 units
    if (shift >= 32) return sign;
    uint32_t q = significand >> shift;
    const uint32_t rem = significand & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t h = (abs >> 13) - (112u << 10);
  const uint32_t rem = abs & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

// E4M3: sign, 4 exponent bits (bias 7), 3 mantissa bits; S.1111.111 is NaN,
// and there is no infinity.
float Fp8ToFloat(uint8_t bits) {
  const uint32_t exponent = (bits >> 3) & 0xFu;
  const uint32_t mantissa = bits & 0x7u;
  float magnitude = 0;
  if (exponent == 0xF && mantissa == 0x7) {
    magnitude = std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: units of 2^-9
  } else {
    magnitude = std::ldexp(static_cast<float>(8 + mantissa), static_cast<int>(exponent) - 10);
  }
  return (bits & 0x80u) ? -magnitude : magnitude;
}

uint8_t FloatToFp8(float value) {
  const uint32_t bits = FloatBits(value);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | 0x7Fu;  // NaN
  const float magnitude = BitsFloat(abs);
  if (magnitude >= kFp8Max) return sign | 0x7Eu;  // saturates, infinities too
  if (magnitude < 0.015625f) {
    // Below the smallest normal (2^-6): a multiple of 2^-9, rounded to nearest
    // even (the default rounding mode); 8 units is that smallest normal.
    return sign | static_cast<uint8_t>(std::nearbyint(magnitude * 512.0f));
  }
  // Keep 3 of float's 23 mantissa bits, rounding to nearest even; a carry out of
  // the mantissa bumps the exponent, as the encoding is monotonic.
  uint32_t q = ((abs >> 23) - 120u) << 3 | ((abs >> 20) & 0x7u);
  const uint32_t rem = abs & 0xFFFFFu;
  if (rem > 0x80000u || (rem == 0x80000u && (q & 1u))) ++q;
  return static_cast<uint8_t>(sign | q);
}

float LoadAsFloat(const void* data, DType dtype, size_t index) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(data)[index];
    case DType::kF16:
      return Fp16ToFloat(static_cast<const uint16_t*>(data)[index]);
    case DType::kBF16:
      return Bf16ToFloat(static_cast<const uint16_t*>(data)[index]);
    case DType::kFP8:
      return Fp8ToFloat(static_cast<const uint8_t*>(data)[index]);
  }
  return 0;
}

void StoreFromFloat(void* data, DType dtype, size_t index, float value) {
  switch (dtype) {
    case DType::kF32:
      static_cast<float*>(data)[index] = value;
      return;
    case DType::kF16:
      static_cast<uint16_t*>(data)[index] = FloatToFp16(value);
      return;
    case DType::kBF16:
      static_cast<uint16_t*>(data)[index] = FloatToBf16(value);
      return;
    case DType::kFP8:
      static_cast<uint8_t*>(data)[index] = FloatToFp8(value);
      return;
  }
}

float SeededValue(uint64_t seed, uint64_t index) { return SeededUniform(seed, index); }

}  // namespace overlap
