// The checked size arithmetic every size product goes through: exact results
// up to the 64-bit boundary, INVALID_ARGUMENT naming the field past it, and
// the mesh bound that keeps group lists small.
#include "common/checked_size.h"

#include <cstdint>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t k2To31 = int64_t{1} << 31;
constexpr int64_t k2To32 = int64_t{1} << 32;

void ExpectRefused(const absl::StatusOr<int64_t>& result, const std::string& message) {
  ASSERT_FALSE(result.ok()) << "expected: " << message;
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr(message));
}

TEST(CheckedSizeTest, MulIsExactUpToTheBoundaryAndRefusedPastIt) {
  EXPECT_EQ(*CheckedMul(k2To31 - 1, 2, "x"), 4294967294);
  EXPECT_EQ(*CheckedMul(k2To31, k2To31, "x"), int64_t{1} << 62);
  // 2^32/6 rounded up: the wrapped mesh's dp. In 64 bits it does not wrap.
  EXPECT_EQ(*CheckedMul(6, 715827883, "x"), k2To32 + 2);
  EXPECT_EQ(*CheckedMul(kInt64Max, 1, "x"), kInt64Max);
  EXPECT_EQ(*CheckedMul(kInt64Max, -1, "x"), -kInt64Max);
  EXPECT_EQ(*CheckedMul(-1, -1, "x"), 1);
  ExpectRefused(CheckedMul(k2To32, k2To32, "ops[0].m*k"),
                "ops[0].m*k: 4294967296 x 4294967296 overflows 64 bits");
  ExpectRefused(CheckedMul(kInt64Max, 2, "x"), "overflows 64 bits");
  ExpectRefused(CheckedMul(kInt64Min, -1, "x"), "overflows 64 bits");
  ExpectRefused(CheckedMul(k2To31 * 2 + 1, k2To31 * 2 + 1, "x"), "overflows 64 bits");
}

TEST(CheckedSizeTest, AddAndProduct) {
  EXPECT_EQ(*CheckedAdd(kInt64Max - 1, 1, "x"), kInt64Max);
  EXPECT_EQ(*CheckedAdd(-1, kInt64Min + 1, "x"), kInt64Min);
  ExpectRefused(CheckedAdd(kInt64Max, 1, "iterations + warmup"),
                "iterations + warmup: 9223372036854775807 + 1 overflows 64 bits");
  ExpectRefused(CheckedAdd(kInt64Min, -1, "x"), "overflows 64 bits");
  EXPECT_EQ(*CheckedProduct({}, "x"), 1);
  EXPECT_EQ(*CheckedProduct({1 << 20, 1 << 20, 1 << 20}, "x"), int64_t{1} << 60);
  // Each pair fits; the three do not.
  ExpectRefused(CheckedProduct({1 << 22, 1 << 21, 1 << 22}, "ops[0]"),
                "ops[0]: 4194304 x 2097152 x 4194304 overflows 64 bits");
  ExpectRefused(CheckedProduct({2, kInt64Max, 0}, "x"), "overflows");
}

TEST(CheckedSizeTest, BytesFitInt64AndSizeT) {
  EXPECT_EQ(*CheckedBytes(int64_t{1} << 61, 2, "x"), int64_t{1} << 62);
  EXPECT_EQ(*CheckedBytes(0, 4, "x"), 0);
  ExpectRefused(CheckedBytes(int64_t{1} << 62, 2, "ops[0]"),
                "ops[0]: 4611686018427387904 elements of 2 bytes: the size in bytes overflows");
  ExpectRefused(CheckedBytes(-1, 2, "ops[0]"), "ops[0]: -1 elements of 2 bytes is not a size");
  ExpectRefused(CheckedBytes(1, -2, "x"), "is not a size");
}

TEST(CheckedSizeTest, SaturatingMulClampsInsteadOfWrapping) {
  EXPECT_EQ(SaturatingMul(65536, 65536), k2To32);
  EXPECT_EQ(SaturatingMul(k2To32, k2To32), kInt64Max);
  EXPECT_EQ(SaturatingMul(-k2To32, k2To32), kInt64Min);
  EXPECT_EQ(SaturatingMul(-k2To32, -k2To32), kInt64Max);
}

// The graphs that wrapped in 32 bits: 6 x 715827883 = 2^32 + 2 read as 2
// devices, 2147483647 x 2 as -2.
TEST(CheckedSizeTest, MeshRanksAreBoundedAndNeverWrap) {
  EXPECT_EQ(*MeshRanks(2, 2), 4);
  EXPECT_EQ(*MeshRanks(kMaxMeshRanks, 1), kMaxMeshRanks);
  EXPECT_EQ(*MeshRanks(256, 256), kMaxMeshRanks);
  auto refused = [](const absl::StatusOr<int>& r, const std::string& message) {
    ASSERT_FALSE(r.ok()) << message;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(message));
  };
  refused(MeshRanks(6, 715827883),
          "mesh: tp x dp = 6 x 715827883 = 4294967298 devices is more than the 65536");
  refused(MeshRanks(2147483647, 2), "mesh: tp x dp = 2147483647 x 2 = 4294967294 devices");
  refused(MeshRanks(65536, 65536), "= 4294967296 devices is more than the 65536");
  refused(MeshRanks(kMaxMeshRanks + 1, 1), "more than the 65536");
  refused(MeshRanks(kInt64Max, kInt64Max), "mesh: tp x dp = 9223372036854775807 x");
  refused(MeshRanks(0, 2), "mesh.tp: must be at least 1 (got 0)");
  refused(MeshRanks(2, -1), "mesh.dp: must be at least 1 (got -1)");
}

TEST(CheckedSizeTest, MeshCoversOnlyAnExactProduct) {
  EXPECT_TRUE(MeshCovers(2, 2, 4));
  EXPECT_FALSE(MeshCovers(2, 3, 4));
  EXPECT_FALSE(MeshCovers(6, 715827883, 2));    // 2 only modulo 2^32
  EXPECT_FALSE(MeshCovers(2147483647, 2, -2));  // -2 only in 32 bits
  EXPECT_FALSE(MeshCovers(65536, 65536, 0));    // 0 only in 32 bits
  EXPECT_FALSE(MeshCovers(kInt64Max, kInt64Max, 1));
  EXPECT_FALSE(MeshCovers(0, 4, 0));
  EXPECT_FALSE(MeshCovers(-2, -2, 4));
}

}  // namespace
}  // namespace overlap
