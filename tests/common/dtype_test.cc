#include "common/dtype.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/seeded_random.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint32_t ToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

TEST(DTypeTest, SizesNamesTolerances) {
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeName(DType::kF32), "fp32");
  EXPECT_EQ(DTypeName(DType::kF16), "fp16");
  EXPECT_EQ(DTypeName(DType::kBF16), "bf16");
  EXPECT_DOUBLE_EQ(DTypeTolerance(DType::kF32), 1e-4);
  EXPECT_DOUBLE_EQ(DTypeTolerance(DType::kF16), 5e-3);
  EXPECT_DOUBLE_EQ(DTypeTolerance(DType::kBF16), 1e-2);
}

// A sum over ranks carried in the dtype rounds once per rank: from 4 bf16
// ranks on, the tolerance is ranks x 2^-8; fp16 and fp32 keep theirs up to 8.
TEST(DTypeTest, ToleranceWidensWithTheRanksASumRoundsThrough) {
  EXPECT_DOUBLE_EQ(DTypeTolerance(DType::kBF16, 2), 1e-2);
  EXPECT_DOUBLE_EQ(DTypeTolerance(DType::kBF16, 4), 4.0 / 256);
  EXPECT_DOUBLE_EQ(DTypeTolerance(DType::kBF16, 8), 8.0 / 256);
  EXPECT_DOUBLE_EQ(DTypeTolerance(DType::kF16, 8), 5e-3);
  EXPECT_DOUBLE_EQ(DTypeTolerance(DType::kF16, 16), 16.0 / 2048);
  EXPECT_DOUBLE_EQ(DTypeTolerance(DType::kF32, 8), 1e-4);
}

TEST(DTypeTest, ParseAcceptsAliases) {
  for (const char* name : {"fp32", "f32", "float32", "FP32"}) {
    ASSERT_TRUE(ParseDType(name).ok()) << name;
    EXPECT_EQ(*ParseDType(name), DType::kF32) << name;
  }
  for (const char* name : {"fp16", "f16", "float16", "half"}) {
    ASSERT_TRUE(ParseDType(name).ok()) << name;
    EXPECT_EQ(*ParseDType(name), DType::kF16) << name;
  }
  for (const char* name : {"bf16", "bfloat16"}) {
    ASSERT_TRUE(ParseDType(name).ok()) << name;
    EXPECT_EQ(*ParseDType(name), DType::kBF16) << name;
  }
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    EXPECT_EQ(*ParseDType(DTypeName(d)), d);
  }
}

TEST(DTypeTest, ParseRejectsUnknown) {
  auto result = ParseDType("fp4");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("unknown dtype \"fp4\""), std::string::npos);
  EXPECT_NE(result.status().message().find("fp8"), std::string::npos) << "lists what is known";
  EXPECT_FALSE(ParseDType("").ok());
}

TEST(Bf16Test, KnownPatterns) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xC000);
  EXPECT_EQ(FloatToBf16(0.0f), 0x0000);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBf16(3.140625f), 0x4049);
  EXPECT_EQ(Bf16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(Bf16ToFloat(0x4049), 3.140625f);
  EXPECT_EQ(Bf16ToFloat(0xC000), -2.0f);
}

TEST(Bf16Test, RoundsToNearestEven) {
  // 1 + 2^-8 is exactly halfway between 0x3F80 (even) and 0x3F81: ties to even.
  EXPECT_EQ(FloatToBf16(FromBits(0x3F808000)), 0x3F80);
  // Halfway between 0x3F81 (odd) and 0x3F82: rounds up to even.
  EXPECT_EQ(FloatToBf16(FromBits(0x3F818000)), 0x3F82);
  // Just above and just below halfway.
  EXPECT_EQ(FloatToBf16(FromBits(0x3F808001)), 0x3F81);
  EXPECT_EQ(FloatToBf16(FromBits(0x3F807FFF)), 0x3F80);
  // Mantissa carry into the exponent: 0x3FFF8000 (odd, halfway) -> 2.0.
  EXPECT_EQ(FloatToBf16(FromBits(0x3FFF8000)), 0x4000);
  // Largest float rounds up to infinity; bf16 max stays finite.
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(FloatToBf16(FromBits(0x7F7F0000)), 0x7F7F);
}

TEST(Bf16Test, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToBf16(inf), 0x7F80);
  EXPECT_EQ(FloatToBf16(-inf), 0xFF80);
  EXPECT_TRUE(std::isinf(Bf16ToFloat(0x7F80)));
  EXPECT_TRUE(std::isinf(Bf16ToFloat(0xFF80)) && Bf16ToFloat(0xFF80) < 0);
  // A NaN whose payload sits only in the low 16 bits must stay a NaN.
  const uint16_t nan_low = FloatToBf16(FromBits(0x7F800001));
  EXPECT_EQ(nan_low & 0x7F80, 0x7F80);
  EXPECT_NE(nan_low & 0x007F, 0);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(nan_low)));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
  EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::quiet_NaN()) & 0x8000, 0x8000);
  // Subnormals pass through (bf16 shares float's exponent range).
  EXPECT_EQ(FloatToBf16(FromBits(0x00010000)), 0x0001);
  EXPECT_EQ(Bf16ToFloat(0x0001), FromBits(0x00010000));
  // Smallest float subnormal is below half a bf16 ulp: rounds to zero.
  EXPECT_EQ(FloatToBf16(FromBits(0x00000001)), 0x0000);
}

TEST(Bf16Test, RoundTripsEveryFinitePattern) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float f = Bf16ToFloat(bits);
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToBf16(f), bits) << std::hex << b;
  }
}

TEST(Fp16Test, KnownPatterns) {
  EXPECT_EQ(FloatToFp16(1.0f), 0x3C00);
  EXPECT_EQ(FloatToFp16(-2.0f), 0xC000);
  EXPECT_EQ(FloatToFp16(0.5f), 0x3800);
  EXPECT_EQ(FloatToFp16(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToFp16(0.0f), 0x0000);
  EXPECT_EQ(FloatToFp16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -14)), 0x0400);     // smallest normal
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -24)), 0x0001);     // smallest subnormal
  EXPECT_EQ(FloatToFp16(std::ldexp(1023.0f, -24)), 0x03FF);  // largest subnormal
  EXPECT_EQ(Fp16ToFloat(0x3C00), 1.0f);
  EXPECT_EQ(Fp16ToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(Fp16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Fp16ToFloat(0x83FF), -std::ldexp(1023.0f, -24));
  EXPECT_EQ(Fp16ToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(FloatToFp16(1.0f / 3.0f), 0x3555);
}

TEST(Fp16Test, RoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 0x3C00 (even) and 0x3C01: ties to even.
  EXPECT_EQ(FloatToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  // 1 + 3*2^-11 is halfway between 0x3C01 (odd) and 0x3C02.
  EXPECT_EQ(FloatToFp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(FloatToFp16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3C01);
  // Overflow: 65519 rounds to 65504, 65520 (tie, odd mantissa) to infinity.
  EXPECT_EQ(FloatToFp16(65519.0f), 0x7BFF);
  EXPECT_EQ(FloatToFp16(65520.0f), 0x7C00);
  EXPECT_EQ(FloatToFp16(-1e6f), 0xFC00);
  // Subnormal ties: 2^-25 is halfway between 0 and 2^-24 -> 0 (even).
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(FloatToFp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  // 1.5 * 2^-24 is halfway between 1 and 2 units -> 2 (even); 2.5 units -> 2.
  EXPECT_EQ(FloatToFp16(std::ldexp(3.0f, -25)), 0x0002);
  EXPECT_EQ(FloatToFp16(std::ldexp(5.0f, -25)), 0x0002);
  EXPECT_EQ(FloatToFp16(std::ldexp(7.0f, -25)), 0x0004);
  // Largest subnormal + half an ulp rounds up into the smallest normal.
  EXPECT_EQ(FloatToFp16(std::ldexp(2047.0f, -25)), 0x0400);
  // Float subnormals are far below fp16's range.
  EXPECT_EQ(FloatToFp16(FromBits(0x00000001)), 0x0000);
  EXPECT_EQ(FloatToFp16(FromBits(0x80400000)), 0x8000);
}

TEST(Fp16Test, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToFp16(inf), 0x7C00);
  EXPECT_EQ(FloatToFp16(-inf), 0xFC00);
  EXPECT_TRUE(std::isinf(Fp16ToFloat(0x7C00)));
  EXPECT_EQ(Fp16ToFloat(0xFC00), -inf);
  const uint16_t nan = FloatToFp16(std::nanf(""));
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  // Payload only in bits fp16 drops must still be NaN.
  const uint16_t nan_low = FloatToFp16(FromBits(0x7F800001));
  EXPECT_NE(nan_low & 0x03FF, 0);
  EXPECT_TRUE(std::isnan(Fp16ToFloat(0x7E00)));
  EXPECT_TRUE(std::isnan(Fp16ToFloat(0x7C01)));
}

TEST(Fp16Test, RoundTripsEveryFinitePatternAndMatchesReference) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float f = Fp16ToFloat(bits);
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToFp16(f), bits) << std::hex << b;
  }
  // Independent float64 reference of fp16 decoding for normals and subnormals.
  for (uint32_t b = 0; b < 0x7C00; ++b) {
    const int exponent = (b >> 10) & 0x1F;
    const int mantissa = b & 0x3FF;
    const double ref =
        exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
    ASSERT_EQ(static_cast<double>(Fp16ToFloat(static_cast<uint16_t>(b))), ref) << b;
  }
}

// Rounding of arbitrary floats checked against a brute-force nearest search.
TEST(Fp16Test, RandomValuesRoundToNearest) {
  for (uint64_t i = 0; i < 20000; ++i) {
    const float scale = std::ldexp(1.0f, static_cast<int>(i % 44) - 28);
    const float f = SeededUniform(7, i) * scale;
    const uint16_t h = FloatToFp16(f);
    const double err = std::fabs(static_cast<double>(Fp16ToFloat(h)) - f);
    for (int delta : {-1, 1}) {
      const uint16_t neighbour = static_cast<uint16_t>(h + delta);
      const float nf = Fp16ToFloat(neighbour);
      if (std::isnan(nf) || ((neighbour ^ h) & 0x8000)) continue;
      const double nerr = std::fabs(static_cast<double>(nf) - f);
      ASSERT_TRUE(err < nerr || (err == nerr && (h & 1) == 0))
          << f << " -> " << std::hex << h << " vs " << neighbour;
    }
  }
}

TEST(DTypeTest, LoadStoreRoundTrip) {
  std::vector<float> f32(4);
  std::vector<uint16_t> f16(4), bf16(4);
  const float values[] = {1.5f, -0.25f, 3.0f, 1.0f + std::ldexp(1.0f, -11)};
  for (size_t i = 0; i < 4; ++i) {
    StoreFromFloat(f32.data(), DType::kF32, i, values[i]);
    StoreFromFloat(f16.data(), DType::kF16, i, values[i]);
    StoreFromFloat(bf16.data(), DType::kBF16, i, values[i]);
  }
  EXPECT_EQ(ToBits(f32[3]), ToBits(values[3]));
  EXPECT_EQ(f16[0], 0x3E00);
  EXPECT_EQ(bf16[1], 0xBE80);
  EXPECT_EQ(LoadAsFloat(f32.data(), DType::kF32, 3), values[3]);
  EXPECT_EQ(LoadAsFloat(f16.data(), DType::kF16, 2), 3.0f);
  EXPECT_EQ(LoadAsFloat(f16.data(), DType::kF16, 3), 1.0f);  // tie rounded to even
  EXPECT_EQ(LoadAsFloat(bf16.data(), DType::kBF16, 1), -0.25f);
}

TEST(DTypeTest, SeededValueIsDeterministicAndInRange) {
  EXPECT_EQ(SeededValue(1234, 0), SeededUniform(1234, 0));
  EXPECT_EQ(SeededValue(1234, 99), SeededValue(1234, 99));
  EXPECT_NE(SeededValue(1234, 0), SeededValue(1235, 0));
  EXPECT_NE(SeededValue(1234, 0), SeededValue(1234, 1));
  double sum = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    const float v = SeededValue(42, i);
    ASSERT_GE(v, -1.0f);
    ASSERT_LT(v, 1.0f);
    sum += v;
  }
  EXPECT_LT(std::fabs(sum / 10000), 0.05);  // roughly centred
}

}  // namespace
}  // namespace overlap

namespace overlap {
namespace {

TEST(Fp8Test, SizeNameParseAndWhatItsGemmsWrite) {
  EXPECT_EQ(DTypeSize(DType::kFP8), 1u);
  EXPECT_EQ(DTypeName(DType::kFP8), "fp8");
  for (const char* name : {"fp8", "FP8", "e4m3", "fp8_e4m3"}) {
    ASSERT_TRUE(ParseDType(name).ok()) << name;
    EXPECT_EQ(*ParseDType(name), DType::kFP8) << name;
  }
  EXPECT_FALSE(ParseDType("e5m2").ok()) << "only E4M3 is supported";
  EXPECT_EQ(GemmOutputDType(DType::kFP8), DType::kBF16);
  EXPECT_TRUE(WeightsStoredTransposed(DType::kFP8));
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    EXPECT_EQ(GemmOutputDType(d), d);
    EXPECT_FALSE(WeightsStoredTransposed(d));
  }
  // An fp8 op's output is bf16 (or fp8 rows copied exactly): bf16's tolerance.
  EXPECT_DOUBLE_EQ(DTypeTolerance(DType::kFP8, 8), DTypeTolerance(DType::kBF16, 8));
}

TEST(Fp8Test, KnownPatterns) {
  EXPECT_EQ(FloatToFp8(0.0f), 0x00);
  EXPECT_EQ(FloatToFp8(-0.0f), 0x80);
  EXPECT_EQ(FloatToFp8(1.0f), 0x38);  // exponent 7 = bias
  EXPECT_EQ(FloatToFp8(-2.0f), 0xC0);
  EXPECT_EQ(FloatToFp8(1.125f), 0x39);        // one mantissa step (2^-3)
  EXPECT_EQ(FloatToFp8(448.0f), 0x7E);        // the largest finite value
  EXPECT_EQ(FloatToFp8(0.015625f), 0x08);     // 2^-6, the smallest normal
  EXPECT_EQ(FloatToFp8(0.001953125f), 0x01);  // 2^-9, the smallest subnormal
  EXPECT_FLOAT_EQ(Fp8ToFloat(0x38), 1.0f);
  EXPECT_FLOAT_EQ(Fp8ToFloat(0x7E), 448.0f);
  EXPECT_FLOAT_EQ(Fp8ToFloat(0xFE), -448.0f);
  EXPECT_FLOAT_EQ(Fp8ToFloat(0x07), 7.0f / 512);  // the largest subnormal
  EXPECT_TRUE(std::isnan(Fp8ToFloat(0x7F)));
  EXPECT_TRUE(std::isnan(Fp8ToFloat(0xFF)));
}

// No infinities: beyond 448 it saturates (CUDA's __NV_SATFINITE), NaN stays NaN.
TEST(Fp8Test, SaturatesAndKeepsNan) {
  EXPECT_EQ(FloatToFp8(449.0f), 0x7E);
  EXPECT_EQ(FloatToFp8(1e6f), 0x7E);
  EXPECT_EQ(FloatToFp8(-1e6f), 0xFE);
  EXPECT_EQ(FloatToFp8(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(FloatToFp8(std::nanf("")) & 0x7F, 0x7F);
}

TEST(Fp8Test, RoundsToNearestEven) {
  // Between 1 (0x38, even) and 1.125 (0x39): the tie goes to 1, above it up.
  EXPECT_EQ(FloatToFp8(1.0625f), 0x38);
  EXPECT_EQ(FloatToFp8(std::nextafter(1.0625f, 2.0f)), 0x39);
  // Between 1.125 (odd) and 1.25: the tie goes up to 1.25 (0x3A).
  EXPECT_EQ(FloatToFp8(1.1875f), 0x3A);
  // A carry out of the mantissa bumps the exponent: 1.9375 is the tie between
  // 1.875 (0x3F, odd) and 2 (0x40).
  EXPECT_EQ(FloatToFp8(1.9375f), 0x40);
  // Subnormals, in units of 2^-9: 0.5 unit ties to 0, 1.5 to 2, 7.5 to the smallest normal.
  EXPECT_EQ(FloatToFp8(0.5f / 512), 0x00);
  EXPECT_EQ(FloatToFp8(1.5f / 512), 0x02);
  EXPECT_EQ(FloatToFp8(7.5f / 512), 0x08);
  EXPECT_EQ(FloatToFp8(-2.5f / 512), 0x82);
}

// Every code but NaN decodes to a value that encodes back to itself, and the
// finite values ascend with the code (so rounding is monotonic).
TEST(Fp8Test, EveryCodeRoundTripsAndTheyAscend) {
  float previous = -1.0f;
  for (int code = 0; code < 0x7F; ++code) {
    const float value = Fp8ToFloat(static_cast<uint8_t>(code));
    EXPECT_EQ(FloatToFp8(value), code) << code;
    EXPECT_EQ(FloatToFp8(-value), code | 0x80) << code;
    EXPECT_GT(value, previous) << code;
    previous = value;
    // The midpoint to the next code rounds to whichever of the two is even.
    if (code + 1 < 0x7F) {
      const float mid = (value + Fp8ToFloat(static_cast<uint8_t>(code + 1))) / 2;
      EXPECT_EQ(FloatToFp8(mid), code % 2 == 0 ? code : code + 1) << code;
    }
  }
}

TEST(Fp8Test, LoadAndStoreGoThroughOneByte) {
  uint8_t bytes[3] = {0xAA, 0xAA, 0xAA};
  StoreFromFloat(bytes, DType::kFP8, 1, -1.0f);
  EXPECT_EQ(bytes[0], 0xAA);
  EXPECT_EQ(bytes[1], 0xB8);
  EXPECT_EQ(bytes[2], 0xAA);
  EXPECT_FLOAT_EQ(LoadAsFloat(bytes, DType::kFP8, 1), -1.0f);
}

}  // namespace
}  // namespace overlap
