// The host engine's single-device primitives, bookkeeping, validation and
// failure injection, checked against values computed here.
#include <atomic>
#include <cmath>
#include <random>
#include <thread>

#include "common/seeded_random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/host_test_util.h"

namespace overlap::engine {
namespace {

using testing::Decode;
using testing::Download;
using testing::Encode;
using ::testing::HasSubstr;
using testing::MakeHostEngine;
using testing::Upload;
using testing::Whole;

TEST(HostEngineTest, DescribesItself) {
  auto engine = MakeHostEngine(3, false, 1 << 20);
  EXPECT_EQ(engine->Name(), "host");
  EXPECT_EQ(engine->DeviceCount(), 3);
  EXPECT_EQ(engine->StreamsPerRole(), 2);
  const DeviceInfo info = engine->GetDeviceInfo(2);
  EXPECT_EQ(info.index, 2);
  EXPECT_EQ(info.name, "host-rank-2");
  EXPECT_EQ(info.memory_bytes, 1 << 20);
  EXPECT_EQ(engine->Versions().nccl, "n/a");
  EXPECT_EQ(engine->Versions().cublas, "n/a");
  EXPECT_TRUE(engine->Monitor()->Healthy());
}

TEST(HostEngineTest, StreamsAreDistinctPerDeviceRoleAndIndex) {
  auto engine = MakeHostEngine(2, false);
  std::set<StreamId> ids;
  for (int d = 0; d < 2; ++d) {
    for (StreamRole role : {StreamRole::kComm, StreamRole::kCompute}) {
      for (int i = 0; i < 2; ++i) ids.insert(engine->GetStream(d, role, i));
    }
  }
  EXPECT_EQ(ids.size(), 8u);
  EXPECT_EQ(ids.count(-1), 0u);
  EXPECT_EQ(engine->GetStream(2, StreamRole::kComm), -1);
  EXPECT_EQ(engine->GetStream(0, StreamRole::kComm, 2), -1);
}

TEST(HostEngineTest, RejectsBadOptions) {
  HostEngineOptions options;
  options.device_count = 0;
  EXPECT_EQ(CreateHostEngine(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.device_count = 2;
  options.fail_op = "teleport";
  auto engine = CreateHostEngine(options);
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(engine.status().message(), HasSubstr("teleport"));
}

TEST(HostEngineTest, AccountsMemoryPerDevice) {
  auto engine = MakeHostEngine(2, false, 4096);
  auto a = engine->Allocate(1, 3000);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(engine->Monitor()->MemoryInUse(1), 3000);
  EXPECT_EQ(engine->Monitor()->MemoryInUse(0), 0);
  auto b = engine->Allocate(1, 2000);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(b.status().message(), HasSubstr("device 1"));
  EXPECT_THAT(b.status().message(), HasSubstr("2000 bytes"));
  EXPECT_THAT(b.status().message(), HasSubstr("1096 of 4096 bytes free"));
  EXPECT_TRUE(engine->Allocate(0, 4096).ok());  // the other device has its own capacity
  engine->Free(*a);
  EXPECT_EQ(engine->Monitor()->MemoryInUse(1), 0);
  EXPECT_TRUE(engine->Allocate(1, 4096).ok());
  EXPECT_EQ(engine->Allocate(2, 16).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HostEngineTest, CopiesRoundTrip) {
  auto engine = MakeHostEngine(1);
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 1e9f};
  const BufferId buffer = Upload(*engine, 0, values);
  EXPECT_EQ(Download(*engine, 0, Whole(buffer, 16)), values);
  EXPECT_EQ(Download(*engine, 0, BufferRef{buffer, 4, 8}), std::vector<float>({-2.0f, 3.25f}));
}

TEST(HostEngineTest, FillRandomMatchesSeededUniformInEveryDtype) {
  auto engine = MakeHostEngine(1);
  const StreamId stream = engine->GetStream(0, StreamRole::kCompute);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const size_t count = 1000, bytes = count * DTypeSize(dtype);
    auto buffer = engine->Allocate(0, bytes + 64);
    ASSERT_TRUE(buffer.ok());
    ASSERT_TRUE(engine->FillRandom(stream, BufferRef{*buffer, 64, bytes}, dtype, 42, 0.5f).ok());
    ASSERT_TRUE(engine->Synchronize({0}).ok());
    const std::vector<float> got = Download(*engine, 0, BufferRef{*buffer, 64, bytes}, dtype);
    for (size_t i = 0; i < count; ++i) {
      const float want = SeededUniform(42, i) * 0.5f;
      // Stored in dtype with round-to-nearest-even, exactly as StoreFromFloat does.
      ASSERT_EQ(got[i], Decode(Encode({want}, dtype), dtype)[0]) << DTypeName(dtype) << " " << i;
    }
    // Bytes before the range are untouched (poisoned NaN in hazard mode).
    EXPECT_TRUE(std::isnan(Download(*engine, 0, BufferRef{*buffer, 0, 4})[0]));
  }
}

TEST(HostEngineTest, FillConstantAndAccumulate) {
  auto engine = MakeHostEngine(1);
  const StreamId s = engine->GetStream(0, StreamRole::kCompute);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const size_t es = DTypeSize(dtype);
    const BufferId dst = Upload(*engine, 0, {1, 2, 3, 4, 5}, dtype);
    const BufferId src = Upload(*engine, 0, {0.5f, 0.25f, -3, 100, 0}, dtype);
    ASSERT_TRUE(engine->Accumulate(s, Whole(dst, 5 * es), Whole(src, 5 * es), dtype).ok());
    ASSERT_TRUE(engine->FillConstant(s, BufferRef{src, es, 2 * es}, dtype, 7.0f).ok());
    ASSERT_TRUE(engine->Synchronize({0}).ok());
    EXPECT_EQ(Download(*engine, 0, Whole(dst, 5 * es), dtype),
              std::vector<float>({1.5f, 2.25f, 0, 104, 5}));
    EXPECT_EQ(Download(*engine, 0, Whole(src, 5 * es), dtype),
              std::vector<float>({0.5f, 7, 7, 100, 0}));
  }
}

// The engine's default scan (a copy back, then the host): the lowest index of a
// NaN or an infinity, after the stream work before it; -1 when none.
TEST(HostEngineTest, FirstNonFiniteFindsTheLowestIndexAfterPriorWork) {
  auto engine = MakeHostEngine(1);
  const StreamId s = engine->GetStream(0, StreamRole::kCompute);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const size_t es = DTypeSize(dtype);
    const BufferId buffer = Upload(*engine, 0, {1, 2, 3, 4, 5, 6}, dtype);
    absl::StatusOr<int64_t> first = engine->FirstNonFinite(Whole(buffer, 6 * es), dtype, 0);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(*first, -1);
    ASSERT_TRUE(engine->FillConstant(s, BufferRef{buffer, 4 * es, es}, dtype, NAN).ok());
    ASSERT_TRUE(engine->FillConstant(s, BufferRef{buffer, 2 * es, es}, dtype, INFINITY).ok());
    first = engine->FirstNonFinite(Whole(buffer, 6 * es), dtype, 0);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(*first, 2) << DTypeName(dtype);
    first = engine->FirstNonFinite(BufferRef{buffer, 3 * es, 3 * es}, dtype, 0);
    ASSERT_TRUE(first.ok());
    EXPECT_EQ(*first, 1);
  }
}

TEST(HostEngineTest, AccumulateRoundsBf16ToNearestEven) {
  auto engine = MakeHostEngine(1);
  const StreamId s = engine->GetStream(0, StreamRole::kCompute);
  // 256 + 1 is halfway between bf16 neighbours 256 and 258: ties to even (256);
  // 258 + 1 ties to 260.
  const BufferId dst = Upload(*engine, 0, {256, 258}, DType::kBF16);
  const BufferId src = Upload(*engine, 0, {1, 1}, DType::kBF16);
  ASSERT_TRUE(engine->Accumulate(s, Whole(dst, 4), Whole(src, 4), DType::kBF16).ok());
  EXPECT_EQ(Download(*engine, 0, Whole(dst, 4), DType::kBF16), std::vector<float>({256, 260}));
}

// C = A x B + beta C over `batch` strided matrices, in float64, from the values
// as stored.
std::vector<double> ReferenceGemm(const GemmArgs& g, const std::vector<float>& a,
                                  const std::vector<float>& b, const std::vector<float>& c) {
  std::vector<double> out(c.begin(), c.end());
  for (int t = 0; t < g.batch; ++t) {
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < g.n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < g.k; ++p) {
          sum += double(a[g.a.offset + t * g.stride_a + i * g.a.ld + p]) *
                 b[g.b.offset + t * g.stride_b + p * g.b.ld + j];
        }
        const size_t ci = g.c.offset + t * g.stride_c + i * g.c.ld + j;
        out[ci] = sum + g.beta * double(c[ci]);
      }
    }
  }
  return out;
}

struct GemmCase {
  const char* name;
  DType dtype;
  int64_t m, n, k;
  int64_t lda, ldb, ldc;
  int batch;
  int64_t stride_a, stride_b, stride_c;
  float beta;
};

class HostGemmTest : public ::testing::TestWithParam<GemmCase> {};

TEST_P(HostGemmTest, MatchesFloat64Reference) {
  const GemmCase& p = GetParam();
  auto engine = MakeHostEngine(1);
  const StreamId s = engine->GetStream(0, StreamRole::kCompute);
  GemmArgs g;
  g.dtype = p.dtype;
  g.m = p.m, g.n = p.n, g.k = p.k;
  g.batch = p.batch;
  g.stride_a = p.stride_a, g.stride_b = p.stride_b, g.stride_c = p.stride_c;
  g.beta = p.beta;
  g.a = MatrixRef{0, 3, p.lda};  // element offsets exercise MatrixRef::offset
  g.b = MatrixRef{0, 1, p.ldb};
  g.c = MatrixRef{0, 2, p.ldc};
  auto size = [&](const MatrixRef& r, int64_t rows, int64_t stride) {
    return r.offset + (p.batch - 1) * stride + rows * r.ld + 4;
  };
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    // What the engine sees: values as stored in the dtype.
    return Decode(Encode(v, p.dtype), p.dtype);
  };
  std::vector<float> a = random(size(g.a, p.m, p.stride_a));
  std::vector<float> b = random(size(g.b, p.k, p.stride_b));
  std::vector<float> c = random(size(g.c, p.m, p.stride_c));
  g.a.buffer = Upload(*engine, 0, a, p.dtype);
  g.b.buffer = Upload(*engine, 0, b, p.dtype);
  g.c.buffer = Upload(*engine, 0, c, p.dtype);
  ASSERT_TRUE(engine->Gemm(s, g).ok());
  ASSERT_TRUE(engine->Synchronize({0}).ok());
  const std::vector<float> got =
      Download(*engine, 0, Whole(g.c.buffer, c.size() * DTypeSize(p.dtype)), p.dtype);
  const std::vector<double> want = ReferenceGemm(g, a, b, c);
  // fp32 accumulation error, plus one rounding to the 16-bit type (2^-8 for bf16,
  // 2^-11 for fp16, relative).
  const double rel = p.dtype == DType::kBF16 ? 1.0 / 256 : p.dtype == DType::kF16 ? 1.0 / 2048 : 0;
  size_t wrong = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double tol = rel * std::abs(want[i]) + 1e-5 * (p.k + 1);
    if (std::abs(got[i] - want[i]) > tol) ++wrong;
    if (wrong == 1 && std::abs(got[i] - want[i]) > tol) {
      ADD_FAILURE() << p.name << ": element " << i << " is " << got[i] << ", want " << want[i];
    }
  }
  EXPECT_EQ(wrong, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, HostGemmTest,
    ::testing::Values(GemmCase{"f32", DType::kF32, 7, 5, 3, 3, 5, 5, 1, 0, 0, 0, 0},
                      GemmCase{"f32_ld_beta1", DType::kF32, 6, 4, 9, 11, 6, 7, 1, 0, 0, 0, 1},
                      GemmCase{"f32_batched", DType::kF32, 4, 3, 5, 5, 3, 3, 3, 4 * 5 + 2,
                               5 * 3 + 1, 4 * 3 + 3, 0},
                      GemmCase{"f32_batched_shared_b_beta1", DType::kF32, 4, 3, 5, 6, 3, 4, 2,
                               4 * 6, 0, 4 * 4, 1},
                      GemmCase{"bf16", DType::kBF16, 16, 24, 32, 32, 24, 24, 1, 0, 0, 0, 0},
                      GemmCase{"bf16_batched_beta1", DType::kBF16, 8, 8, 16, 20, 8, 10, 2, 8 * 20,
                               16 * 8, 8 * 10, 1},
                      GemmCase{"fp16", DType::kF16, 16, 8, 64, 64, 8, 9, 1, 0, 0, 0, 0},
                      GemmCase{"fp16_batched_beta1", DType::kF16, 5, 7, 9, 9, 7, 7, 3, 45, 63, 35,
                               1}),
    [](const ::testing::TestParamInfo<GemmCase>& info) { return std::string(info.param.name); });

TEST(HostEngineTest, GemmWithBetaZeroIgnoresNanInC) {
  auto engine = MakeHostEngine(1);  // hazard mode poisons new buffers with NaN
  const StreamId s = engine->GetStream(0, StreamRole::kCompute);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    GemmArgs g;
    g.dtype = dtype;
    g.m = g.n = g.k = 2;
    g.a = {Upload(*engine, 0, {1, 2, 3, 4}, dtype), 0, 2};
    g.b = {Upload(*engine, 0, {1, 0, 0, 1}, dtype), 0, 2};
    auto c = engine->Allocate(0, 4 * DTypeSize(dtype));
    g.c = {*c, 0, 2};
    ASSERT_TRUE(engine->Gemm(s, g).ok());
    EXPECT_EQ(Download(*engine, 0, Whole(*c, 4 * DTypeSize(dtype)), dtype),
              std::vector<float>({1, 2, 3, 4}));
  }
}

// A gelu epilogue: C is A x B as without one, and D, at its own offset and ld,
// gelu (the tanh approximation) of C as stored; the rest of D's buffer stays.
TEST(HostEngineTest, GemmGeluEpilogueWritesDBesideC) {
  auto engine = MakeHostEngine(1);
  const StreamId s = engine->GetStream(0, StreamRole::kCompute);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    GemmArgs g;
    g.dtype = dtype;
    g.m = 7, g.n = 5, g.k = 3;
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> dist(-2, 2);
    auto random = [&](size_t n) {
      std::vector<float> v(n);
      for (float& x : v) x = dist(rng);
      return Decode(Encode(v, dtype), dtype);
    };
    const std::vector<float> a = random(7 * 3), b = random(3 * 5), c(7 * 6, 0.0f);
    const std::vector<float> d(2 + 7 * 9, 42.0f);
    g.a = {Upload(*engine, 0, a, dtype), 0, 3};
    g.b = {Upload(*engine, 0, b, dtype), 0, 5};
    g.c = {Upload(*engine, 0, c, dtype), 0, 6};
    g.d = {Upload(*engine, 0, d, dtype), 2, 9};
    g.epilogue = Activation::kGelu;
    ASSERT_TRUE(engine->Gemm(s, g).ok());
    ASSERT_TRUE(engine->Synchronize({0}).ok());
    const std::vector<float> got_c =
        Download(*engine, 0, Whole(g.c.buffer, c.size() * DTypeSize(dtype)), dtype);
    const std::vector<float> got_d =
        Download(*engine, 0, Whole(g.d.buffer, d.size() * DTypeSize(dtype)), dtype);
    const std::vector<double> want = ReferenceGemm(g, a, b, c);
    const double rel = dtype == DType::kF32 ? 1e-6 : dtype == DType::kBF16 ? 1.0 / 128 : 1.0 / 1024;
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < g.n; ++j) {
        const double x = got_c[i * 6 + j];
        EXPECT_NEAR(x, want[i * 6 + j], rel * std::abs(want[i * 6 + j]) + 1e-5) << i << "," << j;
        const double gelu =
            0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
        EXPECT_NEAR(got_d[2 + i * 9 + j], gelu, rel * std::abs(gelu) + 1e-5) << i << "," << j;
      }
      for (int64_t j = g.n; j < 9 && i < g.m - 1; ++j) EXPECT_EQ(got_d[2 + i * 9 + j], 42.0f);
    }
    EXPECT_EQ(got_d[0], 42.0f);
    EXPECT_EQ(got_d[1], 42.0f);
  }
}

// fp8 reads B stored transposed ([n, k]) and writes bf16, the layout and the
// output cuBLASLt's fp8 GEMMs have on Hopper.
TEST(HostEngineTest, Fp8GemmReadsWeightsTransposedAndWritesBf16) {
  auto engine = MakeHostEngine(1);
  const StreamId s = engine->GetStream(0, StreamRole::kCompute);
  GemmArgs g;
  g.dtype = DType::kFP8;
  g.m = 2;
  g.k = 2;
  g.n = 3;
  g.a = {Upload(*engine, 0, {1, 2, 3, 4}, DType::kFP8), 0, 2};
  // W = [[1, 0, 2], [0, 1, -1]] (k x n), stored as its transpose, row by row.
  g.b = {Upload(*engine, 0, {1, 0, 0, 1, 2, -1}, DType::kFP8), 0, 2};
  const BufferId c = Upload(*engine, 0, {10, 10, 10, 10, 10, 10}, DType::kBF16);
  g.c = {c, 0, 3};
  ASSERT_TRUE(engine->Gemm(s, g).ok());
  EXPECT_EQ(Download(*engine, 0, Whole(c, 6 * 2), DType::kBF16),
            std::vector<float>({1, 2, 0, 3, 4, 2}));
  g.beta = 1;  // accumulates onto the bf16 C
  ASSERT_TRUE(engine->Gemm(s, g).ok());
  EXPECT_EQ(Download(*engine, 0, Whole(c, 6 * 2), DType::kBF16),
            std::vector<float>({2, 4, 0, 6, 8, 4}));

  // A C sized for fp8 is too small: it holds bf16.
  g.c = {Upload(*engine, 0, {0, 0, 0, 0, 0, 0}, DType::kFP8), 0, 3};
  const absl::Status small = engine->Gemm(s, g);
  EXPECT_EQ(small.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(small.message()), HasSubstr("holds 3 bf16 elements"));
}

// fp8's per-tensor scales multiply the product, read from device memory when
// the GEMM runs (a scale written after the GEMM was enqueued is not seen);
// they are refused for other dtypes and where they are not one 16-byte-aligned
// fp32.
TEST(HostEngineTest, Fp8GemmAppliesPerTensorScales) {
  auto engine = MakeHostEngine(1);
  const StreamId s = engine->GetStream(0, StreamRole::kCompute);
  GemmArgs g;
  g.dtype = DType::kFP8;
  g.m = 1;
  g.k = 2;
  g.n = 2;
  g.a = {Upload(*engine, 0, {256, 448}, DType::kFP8), 0, 2};
  g.b = {Upload(*engine, 0, {1, 0, 0, 2}, DType::kFP8), 0, 2};  // W = diag(1, 2), transposed
  const BufferId scales = Upload(*engine, 0, {0.25f, 0, 0, 0, 0.125f}, DType::kF32);
  g.a_scale = {scales, 0, 4};
  g.b_scale = {scales, 16, 4};
  const BufferId c = Upload(*engine, 0, {0, 0}, DType::kBF16);
  g.c = {c, 0, 2};
  ASSERT_TRUE(engine->Gemm(s, g).ok());
  ASSERT_TRUE(engine->FillConstant(s, Whole(scales, 20), DType::kF32, 1.0f).ok());
  EXPECT_EQ(Download(*engine, 0, Whole(c, 4), DType::kBF16), std::vector<float>({8, 28}));
  ASSERT_TRUE(engine->Gemm(s, g).ok());  // now 1 x 1
  EXPECT_EQ(Download(*engine, 0, Whole(c, 4), DType::kBF16), std::vector<float>({256, 896}));

  GemmArgs wide = g;
  wide.a_scale = {scales, 0, 8};
  GemmArgs misaligned = g;
  misaligned.b_scale = {scales, 4, 4};
  GemmArgs bf16 = g;
  bf16.dtype = DType::kBF16;
  bf16.b_scale = {};
  GemmArgs unknown = g;
  unknown.b_scale = {scales + 100, 0, 4};
  for (const auto& [args, message] :
       {std::pair{wide,
                  "a_scale: a scale is one fp32 (4 bytes) at an offset that is a multiple "
                  "of 16, got 8 bytes"},
        std::pair{misaligned,
                  "b_scale: a scale is one fp32 (4 bytes) at an offset that is a "
                  "multiple of 16, got 4 bytes at offset 4"},
        std::pair{bf16, "per-tensor scales are for fp8 inputs, not bf16"},
        std::pair{unknown, "unknown buffer"}}) {
    const absl::Status status = engine->Gemm(s, args);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_THAT(std::string(status.message()), HasSubstr(message));
  }
}

// fp8 is only gathered: sums in it are refused, whatever the buffers.
TEST(HostEngineTest, Fp8IsNeverSummed) {
  auto engine = MakeHostEngine(2);
  const BufferId a = Upload(*engine, 0, {1, 2}, DType::kFP8);
  const BufferId b = Upload(*engine, 0, {1, 2}, DType::kFP8);
  const absl::Status acc = engine->Accumulate(engine->GetStream(0, StreamRole::kCompute),
                                              Whole(a, 2), Whole(b, 2), DType::kFP8);
  EXPECT_EQ(acc.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(acc.message()), HasSubstr("fp8 is gathered, never summed"));
  CollectiveArgs args;
  args.dtype = DType::kFP8;
  args.count = 2;
  const BufferId c = Upload(*engine, 1, {1, 2}, DType::kFP8);
  args.ranks = {{0, engine->GetStream(0, StreamRole::kComm), Whole(a, 2), Whole(b, 2)},
                {1, engine->GetStream(1, StreamRole::kComm), Whole(c, 2), Whole(c, 2)}};
  for (const absl::Status& status : {engine->AllReduce(args), engine->ReduceScatter(args)}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr("fp8 is gathered, never summed"));
  }
  ASSERT_TRUE(engine->Synchronize({0, 1}).ok());
}

TEST(HostEngineTest, ConcurrentGemmsOnSeveralStreams) {
  auto engine = MakeHostEngine(2, false);
  const int64_t n = 48;
  std::vector<float> a(n * n), b(n * n);
  for (int i = 0; i < n * n; ++i) a[i] = (i % 7) - 3, b[i] = (i % 5) - 2;
  GemmArgs g;
  g.dtype = DType::kF32;
  g.m = g.n = g.k = n;
  std::vector<std::pair<int, BufferId>> outputs;
  for (int d = 0; d < 2; ++d) {
    g.a = {Upload(*engine, d, a), 0, n};
    g.b = {Upload(*engine, d, b), 0, n};
    for (int i = 0; i < 2; ++i) {
      for (StreamRole role : {StreamRole::kComm, StreamRole::kCompute}) {
        g.c = {*engine->Allocate(d, n * n * 4), 0, n};
        ASSERT_TRUE(engine->Gemm(engine->GetStream(d, role, i), g).ok());
        outputs.push_back({d, g.c.buffer});
      }
    }
  }
  ASSERT_TRUE(engine->Synchronize({0, 1}).ok());
  GemmArgs ref = g;
  const std::vector<double> want = ReferenceGemm(ref, a, b, std::vector<float>(n * n));
  for (const auto& [device, buffer] : outputs) {
    const std::vector<float> got = Download(*engine, device, Whole(buffer, n * n * 4));
    for (int i = 0; i < n * n; ++i) ASSERT_EQ(got[i], want[i]) << i;  // small integers: exact
  }
}

TEST(HostEngineTest, WaitOrdersConsumerAfterProducer) {
  auto engine = MakeHostEngine(1, false);
  const StreamId comm = engine->GetStream(0, StreamRole::kComm);
  const StreamId compute = engine->GetStream(0, StreamRole::kCompute);
  const int64_t n = 160;
  const BufferId big = Upload(*engine, 0, std::vector<float>(n * n, 1.0f));
  const BufferId out = *engine->Allocate(0, n * n * 4);
  for (int round = 0; round < 5; ++round) {
    const BufferId x = Upload(*engine, 0, std::vector<float>(256, 0.0f));
    const BufferId y = Upload(*engine, 0, std::vector<float>(256, -1.0f));
    auto ready = engine->CreateEvent(0);
    // The producer is slow (a GEMM first); the consumer would copy zeros
    // without the wait.
    GemmArgs g;
    g.dtype = DType::kF32;
    g.m = g.n = g.k = n;
    g.a = {big, 0, n};
    g.b = {big, 0, n};
    g.c = {out, 0, n};
    ASSERT_TRUE(engine->Gemm(comm, g).ok());
    ASSERT_TRUE(engine->FillConstant(comm, Whole(x, 1024), DType::kF32, 7.0f).ok());
    ASSERT_TRUE(engine->RecordEvent(*ready, comm).ok());
    ASSERT_TRUE(engine->WaitEvent(compute, *ready).ok());
    ASSERT_TRUE(engine->PeerCopy(compute, Whole(y, 1024), 0, Whole(x, 1024), 0).ok());
    ASSERT_TRUE(engine->Synchronize({0}).ok());
    EXPECT_EQ(Download(*engine, 0, Whole(y, 1024)), std::vector<float>(256, 7.0f));
    engine->DestroyEvent(*ready);
  }
}

TEST(HostEngineTest, ElapsedMsBetweenCompletedRecords) {
  auto engine = MakeHostEngine(2, false);
  const StreamId s = engine->GetStream(0, StreamRole::kCompute);
  auto start = engine->CreateEvent(0);
  auto end = engine->CreateEvent(0);
  auto other = engine->CreateEvent(1);
  auto never = engine->CreateEvent(0);
  const int64_t n = 128;
  const BufferId a = Upload(*engine, 0, std::vector<float>(n * n, 0.5f));
  const BufferId c = *engine->Allocate(0, n * n * 4);
  GemmArgs g;
  g.dtype = DType::kF32;
  g.m = g.n = g.k = n;
  g.a = g.b = {a, 0, n};
  g.c = {c, 0, n};
  ASSERT_TRUE(engine->RecordEvent(*start, s).ok());
  ASSERT_TRUE(engine->Gemm(s, g).ok());
  ASSERT_TRUE(engine->RecordEvent(*end, s).ok());
  ASSERT_TRUE(engine->RecordEvent(*other, engine->GetStream(1, StreamRole::kCompute)).ok());
  ASSERT_TRUE(engine->Synchronize({0, 1}).ok());
  auto ms = engine->ElapsedMs(*start, *end);
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_GT(*ms, 0.0);
  EXPECT_LT(*ms, 10000.0);
  EXPECT_TRUE(*engine->EventDone(*end));
  EXPECT_TRUE(*engine->EventDone(*never));  // never recorded: done, as cudaEventQuery says
  EXPECT_EQ(engine->EventDone(424242).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->ElapsedMs(*start, *other).status().code(), absl::StatusCode::kInvalidArgument);
  auto unrecorded = engine->ElapsedMs(*start, *never);
  EXPECT_EQ(unrecorded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unrecorded.status().message(), HasSubstr("never recorded"));
  // An event records on streams of its own device only.
  EXPECT_EQ(engine->RecordEvent(*other, s).code(), absl::StatusCode::kInvalidArgument);
}

// The host backend models stream priority: a deferred-lane task yields to a
// critical-lane task running on its device (at most 2 ms at a time, so it is
// never starved), and a compute task does not.
TEST(HostEngineTest, TheDeferredLaneYieldsToTheCriticalLane) {
  auto engine = MakeHostEngine(1, false);
  HostWorkQueue* work = engine->HostWork();
  ASSERT_NE(work, nullptr);
  std::atomic<bool> critical_running{false};
  std::atomic<int64_t> critical_end_ns{0};
  auto now_ns = [] { return absl::GetCurrentTimeNanos(); };
  ASSERT_TRUE(work->EnqueueHostWork(engine->GetStream(0, StreamRole::kComm), {},
                                    [&](const std::vector<uint8_t*>&) {
                                      critical_running = true;
                                      absl::SleepFor(absl::Milliseconds(300));
                                      critical_end_ns = now_ns();
                                      return absl::OkStatus();
                                    })
                  .ok());
  while (!critical_running) absl::SleepFor(absl::Microseconds(100));
  std::atomic<int64_t> deferred_start_ns{0}, compute_start_ns{0};
  const int64_t enqueued_ns = now_ns();
  for (auto [role, start] : {std::pair{StreamRole::kDeferred, &deferred_start_ns},
                             std::pair{StreamRole::kCompute, &compute_start_ns}}) {
    ASSERT_TRUE(work->EnqueueHostWork(engine->GetStream(0, role), {},
                                      [start = start, &now_ns](const std::vector<uint8_t*>&) {
                                        *start = now_ns();
                                        return absl::OkStatus();
                                      })
                    .ok());
  }
  ASSERT_TRUE(engine->Synchronize({0}).ok());
  // It yielded while the critical task ran, but not to its end.
  EXPECT_GE(deferred_start_ns - enqueued_ns, absl::ToInt64Nanoseconds(absl::Milliseconds(2)));
  EXPECT_LT(deferred_start_ns.load(), critical_end_ns.load());
  EXPECT_LT(compute_start_ns.load(), critical_end_ns.load());
}

TEST(HostEngineTest, RejectsBadHandlesAndRangesWithoutEnqueueing) {
  auto engine = MakeHostEngine(2, false, 1 << 20);
  const StreamId s0 = engine->GetStream(0, StreamRole::kCompute);
  const BufferId buf0 = Upload(*engine, 0, {1, 2, 3, 4});
  const BufferId buf1 = Upload(*engine, 1, {1, 2, 3, 4});
  auto expect_invalid = [](const absl::Status& status, const char* text) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr(text));
  };
  expect_invalid(engine->FillConstant(s0, Whole(999, 16), DType::kF32, 1), "unknown buffer 999");
  expect_invalid(engine->FillConstant(77, Whole(buf0, 16), DType::kF32, 1), "unknown stream 77");
  expect_invalid(engine->FillConstant(s0, BufferRef{buf0, 8, 16}, DType::kF32, 9),
                 "range [8, 24) is outside buffer");
  expect_invalid(engine->FillConstant(s0, Whole(buf1, 16), DType::kF32, 1),
                 "is on device 1, expected device 0");
  expect_invalid(engine->FillConstant(s0, BufferRef{buf0, 2, 4}, DType::kF32, 1),
                 "multiples of the fp32 element size");
  expect_invalid(engine->WaitEvent(s0, 12345), "unknown event 12345");
  expect_invalid(engine->RecordEvent(12345, s0), "unknown event 12345");
  expect_invalid(engine->Accumulate(s0, Whole(buf0, 16), Whole(buf0, 8), DType::kF32),
                 "dst has 16 bytes but src has 8");
  expect_invalid(engine->PeerCopy(engine->GetStream(1, StreamRole::kComm), Whole(buf0, 16), 0,
                                  Whole(buf0, 16), 0),
                 "belongs to neither device");
  expect_invalid(engine->Synchronize({5}), "device 5 does not exist");

  GemmArgs g;
  g.dtype = DType::kF32;
  g.m = 2, g.n = 2, g.k = 2;
  g.a = {buf0, 0, 2};
  g.b = {buf0, 0, 2};
  g.c = {Upload(*engine, 0, {0, 0, 0, 0}), 0, 2};
  ASSERT_TRUE(engine->Gemm(s0, g).ok());
  GemmArgs bad = g;
  bad.a.ld = 3;  // last element touched: (2-1)*3 + 2 = 5 > 4
  expect_invalid(engine->Gemm(s0, bad), "reaches element 5 but buffer");
  bad = g;
  bad.c.ld = 1;
  expect_invalid(engine->Gemm(s0, bad), "c: ld 1 is less than its 2 columns");
  bad = g;
  bad.batch = 2;
  bad.stride_b = 4;
  expect_invalid(engine->Gemm(s0, bad), "Gemm b");
  bad = g;
  bad.c = {buf1, 0, 2};
  expect_invalid(engine->Gemm(s0, bad), "is on device 1");
  bad = g;
  bad.c = g.a;
  expect_invalid(engine->Gemm(s0, bad), "output overlaps an input");
  bad = g;
  bad.k = 0;
  expect_invalid(engine->Gemm(s0, bad), "must be positive");
  // Nothing was enqueued by the failed calls.
  ASSERT_TRUE(engine->Synchronize({0, 1}).ok());
  EXPECT_EQ(Download(*engine, 0, Whole(buf0, 16)), std::vector<float>({1, 2, 3, 4}));
  EXPECT_EQ(Download(*engine, 1, Whole(buf1, 16)), std::vector<float>({1, 2, 3, 4}));
}

// c_on_peer lets C (only C) live on another device: the stores of a direct
// schedule. With beta = 1 the peer's C is read as well.
TEST(HostEngineTest, GemmStoresIntoAPeersBufferOnlyWhenAllowed) {
  auto engine = MakeHostEngine(2, true, 1 << 20);
  const StreamId s0 = engine->GetStream(0, StreamRole::kCompute);
  const BufferId a = Upload(*engine, 0, {1, 2, 3, 4});
  const BufferId b = Upload(*engine, 0, {1, 0, 0, 1});
  const BufferId peer_c = Upload(*engine, 1, {10, 20, 30, 40});
  GemmArgs g;
  g.dtype = DType::kF32;
  g.m = 2, g.n = 2, g.k = 2;
  g.a = {a, 0, 2};
  g.b = {b, 0, 2};
  g.c = {peer_c, 0, 2};
  g.beta = 1.0f;
  const absl::Status refused = engine->Gemm(s0, g);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("is on device 1"));
  g.c_on_peer = true;
  ASSERT_TRUE(engine->Gemm(s0, g).ok());
  ASSERT_TRUE(engine->Synchronize({0, 1}).ok());
  EXPECT_EQ(Download(*engine, 1, Whole(peer_c, 16)), std::vector<float>({11, 22, 33, 44}));
  GemmArgs remote_a = g;
  remote_a.a = {peer_c, 0, 2};
  remote_a.c = {a, 0, 2};
  EXPECT_EQ(engine->Gemm(s0, remote_a).code(), absl::StatusCode::kInvalidArgument);
}

TEST(HostEngineTest, FreeWaitsForQueuedWork) {
  auto engine = MakeHostEngine(1, false);
  const StreamId s = engine->GetStream(0, StreamRole::kCompute);
  for (int i = 0; i < 20; ++i) {
    auto b = engine->Allocate(0, 1 << 16);
    ASSERT_TRUE(engine->FillRandom(s, Whole(*b, 1 << 16), DType::kF32, i, 1).ok());
    engine->Free(*b);
  }
  EXPECT_EQ(engine->Monitor()->MemoryInUse(0), 0);
  EXPECT_TRUE(engine->Synchronize({0}).ok());
}

TEST(HostEngineTest, CallsForDisjointDevicesFromTwoThreads) {
  auto engine = MakeHostEngine(4, true);
  auto work = [&](int d0) {
    const int d1 = d0 + 1;
    for (int round = 0; round < 20; ++round) {
      CollectiveArgs args;
      args.dtype = DType::kF32;
      args.count = 64;
      std::vector<BufferId> recvs;
      for (int d : {d0, d1}) {
        const BufferId send = Upload(*engine, d, std::vector<float>(64, float(d + round)));
        const BufferId recv = *engine->Allocate(d, 64 * 4);
        recvs.push_back(recv);
        args.ranks.push_back(
            {d, engine->GetStream(d, StreamRole::kComm), Whole(send, 256), Whole(recv, 256)});
      }
      ASSERT_TRUE(engine->AllReduce(args).ok());
      ASSERT_TRUE(engine->Synchronize({d0, d1}).ok());
      EXPECT_EQ(Download(*engine, d0, Whole(recvs[0], 256)),
                std::vector<float>(64, float(d0 + d1 + 2 * round)));
    }
  };
  std::thread t([&] { work(2); });
  work(0);
  t.join();
}

TEST(HostEngineFailureTest, InjectedCollectiveFailureIsAbortedAndReported) {
  HostEngineOptions options;
  options.fail_op = "all_gather";
  options.fail_after = 1;
  auto engine = *CreateHostEngine(options);
  CollectiveArgs args;
  args.dtype = DType::kF32;
  args.count = 4;
  for (int d = 0; d < 2; ++d) {
    args.ranks.push_back({d, engine->GetStream(d, StreamRole::kComm),
                          Whole(Upload(*engine, d, {1, 2, 3, 4}), 16),
                          Whole(*engine->Allocate(d, 32), 32)});
  }
  EXPECT_TRUE(engine->AllGather(args).ok());
  const absl::Status failed = engine->AllGather(args);
  EXPECT_EQ(failed.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(failed.message(), HasSubstr("injected NCCL failure"));
  EXPECT_EQ(engine->Synchronize({0, 1}).code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(engine->Synchronize({0, 1}).ok());  // reported once, then cleared
  EXPECT_TRUE(engine->AllGather(args).ok());
  EXPECT_TRUE(engine->Monitor()->Healthy());
}

TEST(HostEngineFailureTest, AsyncFailureSurfacesAtSynchronize) {
  HostEngineOptions options;
  options.fail_op = "gemm";
  options.fail_async = true;
  auto engine = *CreateHostEngine(options);
  GemmArgs g;
  g.dtype = DType::kF32;
  g.m = g.n = g.k = 1;
  g.a = g.b = {Upload(*engine, 1, {3}), 0, 1};
  g.c = {Upload(*engine, 1, {5}), 0, 1};
  EXPECT_TRUE(engine->Gemm(engine->GetStream(1, StreamRole::kCompute), g).ok());
  EXPECT_TRUE(engine->Synchronize({0}).ok());  // the other device saw nothing
  const absl::Status status = engine->Synchronize({1});
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("injected cuBLAS failure"));
  EXPECT_EQ(Download(*engine, 1, Whole(g.c.buffer, 4)), std::vector<float>({5}));  // not run
}

TEST(HostEngineFailureTest, AsyncCollectiveFailureReachesEveryRank) {
  HostEngineOptions options;
  options.device_count = 4;
  options.fail_op = "reduce_scatter";
  options.fail_async = true;
  auto engine = *CreateHostEngine(options);
  CollectiveArgs args;
  args.dtype = DType::kF32;
  args.count = 2;
  for (int d = 0; d < 4; ++d) {
    args.ranks.push_back({d, engine->GetStream(d, StreamRole::kComm),
                          Whole(Upload(*engine, d, std::vector<float>(8, 1)), 32),
                          Whole(Upload(*engine, d, {-1, -1}), 8)});
  }
  EXPECT_TRUE(engine->ReduceScatter(args).ok());
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(engine->Synchronize({d}).code(), absl::StatusCode::kAborted) << "device " << d;
    EXPECT_EQ(Download(*engine, d, args.ranks[d].recv), std::vector<float>({-1, -1}));
  }
  EXPECT_TRUE(engine->ReduceScatter(args).ok());  // only call #0 fails
  EXPECT_EQ(Download(*engine, 3, args.ranks[3].recv), std::vector<float>({4, 4}));
}

TEST(HostEngineTest, DestructionRunsQueuedWorkAndJoins) {
  for (int round = 0; round < 10; ++round) {
    auto engine = MakeHostEngine(2, false);
    CollectiveArgs args;
    args.dtype = DType::kBF16;
    args.count = 1 << 12;
    for (int d = 0; d < 2; ++d) {
      const BufferId b = *engine->Allocate(d, 2 << 12);
      ASSERT_TRUE(engine
                      ->FillRandom(engine->GetStream(d, StreamRole::kComm), Whole(b, 2 << 12),
                                   DType::kBF16, d, 1)
                      .ok());
      args.ranks.push_back(
          {d, engine->GetStream(d, StreamRole::kComm), Whole(b, 2 << 12), Whole(b, 2 << 12)});
    }
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(engine->AllReduce(args).ok());
    // No Synchronize: the destructor must neither hang nor leave threads behind.
  }
}

TEST(HostEngineFailureTest, StickyFailureMakesEngineUnhealthy) {
  HostEngineOptions options;
  options.fail_op = "allocate";
  options.fail_after = 2;
  options.inject_sticky_error = true;
  auto engine = *CreateHostEngine(options);
  EXPECT_TRUE(engine->Allocate(0, 16).ok());
  EXPECT_TRUE(engine->Allocate(1, 16).ok());
  EXPECT_TRUE(engine->Monitor()->Healthy());
  EXPECT_EQ(engine->Allocate(0, 16).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(engine->Monitor()->Healthy());
  const BufferRef ref{1, 0, 16};
  EXPECT_EQ(
      engine->FillConstant(engine->GetStream(0, StreamRole::kCompute), ref, DType::kF32, 1).code(),
      absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace overlap::engine
