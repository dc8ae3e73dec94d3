// The GEMM argument checks every backend shares (server/engine/gemm_checks.h).
#include "server/engine/gemm_checks.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap::engine {
namespace {

using ::testing::HasSubstr;

GemmArgs Fp32(int64_t m, int64_t n, int64_t k) {
  GemmArgs g;
  g.dtype = DType::kF32;
  g.m = m, g.n = n, g.k = k;
  g.a = {1, 0, k};
  g.b = {2, 0, n};
  g.c = {3, 0, n};
  return g;
}

// What CheckGemmArgs, then CheckGemmOutput, say of `g`, which must be INVALID_ARGUMENT.
std::string Refused(const GemmArgs& g) {
  absl::StatusOr<GemmOperands> ops = CheckGemmArgs(g);
  absl::Status status = ops.ok() ? CheckGemmOutput(g, *ops) : ops.status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  return std::string(status.message());
}

TEST(GemmChecksTest, ExtentsFollowShapeLdAndBatch) {
  GemmArgs g = Fp32(4, 8, 16);
  g.c.ld = 10;
  auto ops = CheckGemmArgs(g);
  ASSERT_TRUE(ops.ok()) << ops.status();
  EXPECT_EQ(ops->a.extent, 3 * 16 + 16);
  EXPECT_EQ(ops->c.extent, 3 * 10 + 8);
  g.batch = 3;
  g.stride_c = 40;
  ops = CheckGemmArgs(g);
  ASSERT_TRUE(ops.ok()) << ops.status();
  EXPECT_EQ(ops->c.extent, 2 * 40 + 3 * 10 + 8);
  EXPECT_TRUE(CheckGemmOutput(g, *ops).ok());
  // fp8 reads B stored [n, k] and writes bf16.
  GemmArgs fp8 = Fp32(4, 8, 16);
  fp8.dtype = DType::kFP8;
  fp8.b.ld = 16;
  ops = CheckGemmArgs(fp8);
  ASSERT_TRUE(ops.ok()) << ops.status();
  EXPECT_EQ(ops->b.rows, 8);
  EXPECT_EQ(ops->c.dtype, DType::kBF16);
}

TEST(GemmChecksTest, RefusesWhatNoBackendCanRun) {
  EXPECT_THAT(Refused(Fp32(0, 8, 8)), HasSubstr("must be positive"));
  GemmArgs g = Fp32(4, 8, 8);
  g.batch = 0;
  EXPECT_THAT(Refused(g), HasSubstr("batch must be >= 1"));
  g = Fp32(4, 8, 8);
  g.a.ld = 7;
  EXPECT_THAT(Refused(g), HasSubstr("GEMM a: ld 7 is less than its 8 columns"));
  g = Fp32(4, 8, 8);
  g.batch = 2;
  g.stride_b = -1;
  EXPECT_THAT(Refused(g), HasSubstr("GEMM b: negative batch stride"));
  g = Fp32(4, 8, 8);
  g.batch = 2;
  g.stride_a = g.stride_b = 64;
  g.stride_c = 8;  // the second batch of C starts inside the first
  EXPECT_THAT(Refused(g), HasSubstr("makes the batches of c overlap"));
  g = Fp32(4, 8, 8);
  g.c = {1, 16, 8};  // A's buffer, rows 2 and 3 of A
  EXPECT_THAT(Refused(g), HasSubstr("output overlaps an input"));
  g.c = {1, 32, 8};  // past A
  absl::StatusOr<GemmOperands> beside = CheckGemmArgs(g);
  ASSERT_TRUE(beside.ok());
  EXPECT_TRUE(CheckGemmOutput(g, *beside).ok()) << "beside A in its buffer is fine";
}

TEST(GemmChecksTest, AnEpilogueWritesDBesideC) {
  GemmArgs g = Fp32(4, 8, 16);
  g.epilogue = Activation::kGelu;
  g.d = {4, 0, 12};
  absl::StatusOr<GemmOperands> ops = CheckGemmArgs(g);
  ASSERT_TRUE(ops.ok()) << ops.status();
  EXPECT_TRUE(ops->has_d());
  EXPECT_EQ(ops->d.extent, 3 * 12 + 8);
  EXPECT_EQ(ops->d.dtype, DType::kF32);
  EXPECT_TRUE(CheckGemmOutput(g, *ops).ok());
  EXPECT_FALSE(CheckGemmArgs(Fp32(4, 8, 16))->has_d());

  GemmArgs bad = g;
  bad.epilogue = Activation::kSwiglu;
  EXPECT_THAT(Refused(bad), HasSubstr("only gelu runs in a GEMM's epilogue"));
  bad = g;
  bad.beta = 1;
  EXPECT_THAT(Refused(bad), HasSubstr("only with beta 0"));
  bad = g;
  bad.batch = 2;
  bad.stride_a = 64, bad.stride_b = 128, bad.stride_c = 32;
  EXPECT_THAT(Refused(bad), HasSubstr("one batch"));
  bad = g;
  bad.dtype = DType::kFP8;
  bad.b.ld = 16;
  EXPECT_THAT(Refused(bad), HasSubstr("no fp8 inputs"));
  bad = g;
  bad.d.ld = 7;
  EXPECT_THAT(Refused(bad), HasSubstr("GEMM d: ld 7 is less than its 8 columns"));
  bad = g;
  bad.d = {3, 8, 8};  // C's buffer, from C's second row
  EXPECT_THAT(Refused(bad), HasSubstr("the epilogue's output overlaps an operand"));
  bad.d = {3, 32, 8};  // past C
  ops = CheckGemmArgs(bad);
  ASSERT_TRUE(ops.ok());
  EXPECT_TRUE(CheckGemmOutput(bad, *ops).ok());
}

}  // namespace
}  // namespace overlap::engine
