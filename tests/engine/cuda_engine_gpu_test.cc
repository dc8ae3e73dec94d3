// The CUDA engine on real GPUs. Without a GPU every test skips ("no GPU visible");
// the multi-GPU tests skip with "needs 2 GPUs" on a single-GPU machine.
//
// Inputs are made on the device with FillRandom and regenerated on the host with
// SeededUniform + StoreFromFloat, so references never need the inputs copied back.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/dtype.h"
#include "common/seeded_random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/cuda/cuda_engine.h"
#include "tests/gpu_ranks_util.h"

namespace overlap::cuda {
namespace {

using engine::BufferId;
using engine::BufferRef;
using engine::StreamRole;
using ::testing::HasSubstr;

constexpr int64_t kPoolBytes = int64_t{1} << 30;
constexpr int kNcclCtas = 16;

class CudaEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    DaemonConfig config;
    config.pool_bytes_per_device = kPoolBytes;
    config.gemm_workspace_bytes = int64_t{32} << 20;
    config.collective_timeout_s = 60;
    // A budget for NCCL beside GEMMs: GEMMs marked beside_collective leave
    // kNcclCtas SMs free (unmarked work is unaffected).
    config.nccl_overlap_ctas = kNcclCtas;
    ApplyTestRanksPerGpu(&config);
    absl::StatusOr<std::unique_ptr<CudaEngine>> created = CreateCudaEngineTyped(config);
    if (created.ok()) {
      engine_ = created->release();
    } else {
      create_status_ = new absl::Status(created.status());
    }
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
    delete create_status_;
    create_status_ = nullptr;
  }

  void SetUp() override {
    if (engine_ == nullptr) {
      if (create_status_->code() == absl::StatusCode::kUnavailable) {
        GTEST_SKIP() << create_status_->message();
      }
      FAIL() << "CreateCudaEngine: " << *create_status_;
    }
  }
  void TearDown() override {
    if (engine_ == nullptr) return;
    for (const auto& [buffer, device] : buffers_) engine_->Free(buffer);
  }

  CudaEngine& eng() { return *engine_; }

  BufferId Alloc(int device, size_t bytes) {
    absl::StatusOr<BufferId> buffer = engine_->Allocate(device, bytes);
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    if (!buffer.ok()) return engine::kNoBuffer;
    buffers_.emplace_back(*buffer, device);
    return *buffer;
  }

  std::vector<uint8_t> Download(BufferId buffer, size_t bytes, int device, size_t offset = 0) {
    std::vector<uint8_t> host(bytes);
    const absl::Status status = engine_->CopyToHost(host.data(), {buffer, offset, bytes}, device);
    EXPECT_TRUE(status.ok()) << status;
    return host;
  }

  // Dense row-major C = A x B, `batch` of them packed back to back.
  static engine::GemmArgs DenseGemm(DType dtype, BufferId a, BufferId b, BufferId c, int64_t m,
                                    int64_t n, int64_t k, int batch = 1) {
    engine::GemmArgs args;
    args.dtype = dtype;
    args.m = m;
    args.n = n;
    args.k = k;
    args.a = {a, 0, k};
    args.b = {b, 0, n};
    args.c = {c, 0, n};
    args.batch = batch;
    args.stride_a = m * k;
    args.stride_b = k * n;
    args.stride_c = m * n;
    return args;
  }

  // What FillRandom(seed, scale) stores, computed on the host.
  static std::vector<uint8_t> HostRandom(DType dtype, size_t count, uint64_t seed, float scale) {
    std::vector<uint8_t> host(count * DTypeSize(dtype));
    for (size_t i = 0; i < count; ++i) {
      StoreFromFloat(host.data(), dtype, i, SeededUniform(seed, i) * scale);
    }
    return host;
  }

  static CudaEngine* engine_;
  static absl::Status* create_status_;
  std::vector<std::pair<BufferId, int>> buffers_;
};

CudaEngine* CudaEngineTest::engine_ = nullptr;
absl::Status* CudaEngineTest::create_status_ = nullptr;

#define REQUIRE_GPUS(n)                                                                \
  if (eng().DeviceCount() < (n)) {                                                     \
    GTEST_SKIP() << "needs " << (n) << " GPUs, " << eng().DeviceCount() << " visible"; \
  }

TEST_F(CudaEngineTest, ReportsDevicesVersionsAndStreams) {
  EXPECT_EQ(eng().Name(), "cuda");
  ASSERT_GE(eng().DeviceCount(), 1);
  const engine::DeviceInfo info = eng().GetDeviceInfo(0);
  EXPECT_EQ(info.index, 0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_FALSE(info.pci_bus_id.empty());
  EXPECT_GT(info.memory_bytes, 0);
  EXPECT_LE(info.memory_bytes, kPoolBytes);
  EXPECT_GT(eng().MultiprocessorCount(0), 0);
  DaemonConfig asked;
  ApplyTestRanksPerGpu(&asked);
  if (asked.ranks_per_gpu > 1) {  // ranks 0 and 1 share GPU 0, and say so
    EXPECT_THAT(info.name, HasSubstr(absl::StrCat("(shared by ", asked.ranks_per_gpu, " ranks)")));
    EXPECT_EQ(eng().GetDeviceInfo(1).pci_bus_id, info.pci_bus_id);
    EXPECT_EQ(eng().DeviceCount() % asked.ranks_per_gpu, 0);
  }
  const engine::BackendVersions versions = eng().Versions();
  EXPECT_THAT(versions.cuda_runtime, ::testing::StartsWith("13."));
  EXPECT_NE(versions.cuda_driver, "none");
  EXPECT_THAT(versions.nccl, ::testing::StartsWith("2."));
  EXPECT_THAT(versions.cublas, ::testing::MatchesRegex("[0-9]+\\.[0-9]+\\.[0-9]+"));
  EXPECT_EQ(eng().StreamsPerRole(), 2);
  std::set<engine::StreamId> ids;
  for (int d = 0; d < eng().DeviceCount(); ++d) {
    for (StreamRole role : {StreamRole::kCompute, StreamRole::kComm, StreamRole::kDeferred}) {
      for (int i = 0; i < 2; ++i) ids.insert(eng().GetStream(d, role, i));
    }
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(6 * eng().DeviceCount()));
  // The deferred lane under the critical one, with its communicator's cap.
  EXPECT_THAT(eng().DescribeLanes(), HasSubstr("deferred lane: streams at priority"));
  EXPECT_THAT(eng().DescribeLanes(), HasSubstr("NCCL channel 2"));
  EXPECT_EQ(ids.count(-1), 0u);
  EXPECT_EQ(eng().GetStream(0, StreamRole::kCompute, 2), -1);
  EXPECT_EQ(eng().GetStream(eng().DeviceCount(), StreamRole::kComm, 0), -1);
  EXPECT_TRUE(eng().Monitor()->Healthy());
}

TEST_F(CudaEngineTest, FillRandomIsBitIdenticalToTheHostConversion) {
  const engine::StreamId stream = eng().GetStream(0, StreamRole::kCompute, 0);
  const size_t count = 100003;  // not a multiple of the vector width
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32, DType::kFP8}) {
    // Scales that exercise subnormals (fp16, fp8), overflow to infinity (fp16 max
    // 65504) and saturation (fp8 max 448).
    for (float scale : {1.0f, 3.7f, 1e-6f, 1e5f}) {
      for (size_t offset_elems : {size_t{0}, size_t{1}}) {  // aligned and unaligned paths
        SCOPED_TRACE(DTypeName(dtype) + " scale " + std::to_string(scale) + " offset " +
                     std::to_string(offset_elems));
        const size_t elem = DTypeSize(dtype);
        const BufferId buffer = Alloc(0, (count + 1) * elem);
        const BufferRef ref{buffer, offset_elems * elem, count * elem};
        ASSERT_TRUE(eng().FillRandom(stream, ref, dtype, 1234, scale).ok());
        const std::vector<uint8_t> device = Download(buffer, count * elem, 0, offset_elems * elem);
        const std::vector<uint8_t> host = HostRandom(dtype, count, 1234, scale);
        size_t mismatches = 0, first = count;
        for (size_t i = 0; i < count; ++i) {
          if (std::memcmp(&device[i * elem], &host[i * elem], elem) != 0) {
            if (mismatches++ == 0) first = i;
          }
        }
        EXPECT_EQ(mismatches, 0u) << "first at " << first;
      }
    }
  }
}

TEST_F(CudaEngineTest, FillConstantPoisonsWithNaN) {
  const engine::StreamId stream = eng().GetStream(0, StreamRole::kComm, 1);
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32, DType::kFP8}) {
    const size_t count = 4097;
    const BufferId buffer = Alloc(0, count * DTypeSize(dtype));
    ASSERT_TRUE(eng().FillConstant(stream, {buffer, 0, count * DTypeSize(dtype)}, dtype, NAN).ok());
    const std::vector<uint8_t> host = Download(buffer, count * DTypeSize(dtype), 0);
    for (size_t i = 0; i < count; ++i) {
      ASSERT_TRUE(std::isnan(LoadAsFloat(host.data(), dtype, i))) << DTypeName(dtype) << " " << i;
    }
    ASSERT_TRUE(
        eng().FillConstant(stream, {buffer, 0, count * DTypeSize(dtype)}, dtype, 2.5f).ok());
    const std::vector<uint8_t> twos = Download(buffer, count * DTypeSize(dtype), 0);
    EXPECT_EQ(LoadAsFloat(twos.data(), dtype, count - 1), 2.5f);
  }
}

// The scan that proves an output written: -1 on finite data, else the lowest
// index of a NaN or an infinity, wherever in the grid's stride it lies; a
// sub-range counts from its own start.
TEST_F(CudaEngineTest, FirstNonFiniteFindsTheLowestIndex) {
  const engine::StreamId stream = eng().GetStream(0, StreamRole::kCompute, 0);
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    const size_t es = DTypeSize(dtype);
    const size_t count = (size_t{1} << 22) + 3;  // more elements than threads in the grid
    const BufferId buffer = Alloc(0, count * es);
    const BufferRef all{buffer, 0, count * es};
    ASSERT_TRUE(eng().FillConstant(stream, all, dtype, 2.5f).ok());
    absl::StatusOr<int64_t> first = eng().FirstNonFinite(all, dtype, 0);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(*first, -1) << DTypeName(dtype);
    for (size_t i : {count - 1, size_t{3000001}, size_t{600013}}) {
      ASSERT_TRUE(
          eng()
              .FillConstant(stream, {buffer, i * es, es}, dtype, i == 600013 ? INFINITY : NAN)
              .ok());
      first = eng().FirstNonFinite(all, dtype, 0);
      ASSERT_TRUE(first.ok()) << first.status();
      EXPECT_EQ(*first, static_cast<int64_t>(i)) << DTypeName(dtype);
    }
    first = eng().FirstNonFinite({buffer, 600014 * es, 1000 * es}, dtype, 0);
    ASSERT_TRUE(first.ok());
    EXPECT_EQ(*first, -1);
    first = eng().FirstNonFinite({buffer, 600000 * es, 1000 * es}, dtype, 0);
    ASSERT_TRUE(first.ok());
    EXPECT_EQ(*first, 13);
  }
  EXPECT_EQ(eng().FirstNonFinite({engine::kNoBuffer, 0, 4}, DType::kF32, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaEngineTest, AccumulateAddsInFp32AndRoundsOnce) {
  const engine::StreamId stream = eng().GetStream(0, StreamRole::kCompute, 1);
  const size_t count = 10007;
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (size_t offset : {size_t{0}, size_t{1}}) {
      SCOPED_TRACE(DTypeName(dtype) + " offset " + std::to_string(offset));
      const size_t elem = DTypeSize(dtype);
      const BufferId dst = Alloc(0, (count + 1) * elem);
      const BufferId src = Alloc(0, (count + 1) * elem);
      const BufferRef dst_ref{dst, offset * elem, count * elem};
      const BufferRef src_ref{src, 0, count * elem};
      ASSERT_TRUE(eng().FillRandom(stream, dst_ref, dtype, 1, 2.0f).ok());
      ASSERT_TRUE(eng().FillRandom(stream, src_ref, dtype, 2, 0.75f).ok());
      ASSERT_TRUE(eng().Accumulate(stream, dst_ref, src_ref, dtype).ok());
      const std::vector<uint8_t> got = Download(dst, count * elem, 0, offset * elem);
      const std::vector<uint8_t> a = HostRandom(dtype, count, 1, 2.0f);
      const std::vector<uint8_t> b = HostRandom(dtype, count, 2, 0.75f);
      std::vector<uint8_t> want(count * elem);
      for (size_t i = 0; i < count; ++i) {
        StoreFromFloat(want.data(), dtype, i,
                       LoadAsFloat(a.data(), dtype, i) + LoadAsFloat(b.data(), dtype, i));
      }
      EXPECT_EQ(got, want);
    }
  }
  const BufferId small = Alloc(0, 64);
  const BufferId big = Alloc(0, 128);
  EXPECT_EQ(eng().Accumulate(stream, {big, 0, 128}, {small, 0, 64}, DType::kF32).code(),
            absl::StatusCode::kInvalidArgument);
}

struct GemmCase {
  const char* name;
  int64_t m, n, k, lda, ldb, ldc;
  int batch;
  float beta;
  size_t offset;  // elements before each matrix in its buffer
};

void PrintTo(const GemmCase& c, std::ostream* os) { *os << c.name; }

// The GEMM a case describes, its matrices at c.offset of buffers a, b and cbuf.
engine::GemmArgs CaseGemm(const GemmCase& c, DType dtype, BufferId a, BufferId b, BufferId cbuf,
                          int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  engine::GemmArgs args;
  args.dtype = dtype;
  args.m = c.m;
  args.n = c.n;
  args.k = c.k;
  args.a = {a, c.offset, c.lda};
  args.b = {b, c.offset, c.ldb};
  args.c = {cbuf, c.offset, c.ldc};
  args.beta = c.beta;
  args.batch = c.batch;
  args.stride_a = stride_a;
  args.stride_b = stride_b;
  args.stride_c = stride_c;
  return args;
}

// fp8 GEMMs read B stored [n, k] (ldb >= k) and write bf16, batched with B
// shared or not, beta 0 (C poisoned) and 1, against float64 on the fp8 inputs
// as stored; and fp8 is never summed.
class CudaFp8GemmTest : public CudaEngineTest, public ::testing::WithParamInterface<GemmCase> {};

// Each case runs twice: inputs in [-1, 1) with no scales, then over E4M3's
// whole range with per-tensor scales read from device memory.
TEST_P(CudaFp8GemmTest, MatchesFloat64Reference) {
  const GemmCase& c = GetParam();
  const int64_t stride_a = c.batch > 1 ? c.m * c.lda + 32 : 0;
  const int64_t stride_b = c.batch > 1 && c.offset == 0 ? c.n * c.ldb + 16 : 0;  // 0: shared
  const int64_t stride_c = c.batch > 1 ? c.m * c.ldc + 8 : 0;
  const size_t count_a = c.offset + (c.batch - 1) * stride_a + c.m * c.lda;
  const size_t count_b = c.offset + (c.batch - 1) * stride_b + c.n * c.ldb;
  const size_t count_c = c.offset + (c.batch - 1) * stride_c + c.m * c.ldc;
  const BufferId a = Alloc(0, count_a);
  const BufferId b = Alloc(0, count_b);
  const BufferId cbuf = Alloc(0, count_c * 2);
  const BufferId scales = Alloc(0, 32);  // two scales, 16 bytes apart
  const engine::StreamId stream = eng().GetStream(0, StreamRole::kCompute, 0);
  for (const bool scaled : {false, true}) {
    SCOPED_TRACE(scaled ? "per-tensor scales" : "no scales");
    const float fill = scaled ? kFp8Max : 1.0f;
    const float a_scale = scaled ? 1.0f / kFp8Max : 1.0f;
    const float b_scale = scaled ? 0.25f / kFp8Max : 1.0f;
    ASSERT_TRUE(eng().FillRandom(stream, {a, 0, count_a}, DType::kFP8, 21, fill).ok());
    ASSERT_TRUE(eng().FillRandom(stream, {b, 0, count_b}, DType::kFP8, 22, fill).ok());
    ASSERT_TRUE(eng().FillConstant(stream, {scales, 0, 4}, DType::kF32, a_scale).ok());
    ASSERT_TRUE(eng().FillConstant(stream, {scales, 16, 4}, DType::kF32, b_scale).ok());
    const BufferRef c_all{cbuf, 0, count_c * 2};
    if (c.beta == 0.0f) {
      ASSERT_TRUE(eng().FillConstant(stream, c_all, DType::kBF16, NAN).ok());
    } else {
      ASSERT_TRUE(eng().FillRandom(stream, c_all, DType::kBF16, 23, 1.0f).ok());
    }
    engine::GemmArgs args = CaseGemm(c, DType::kFP8, a, b, cbuf, stride_a, stride_b, stride_c);
    if (scaled) {
      args.a_scale = {scales, 0, 4};
      args.b_scale = {scales, 16, 4};
    }
    const absl::Status status = eng().Gemm(stream, args);
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_TRUE(eng().Synchronize({0}).ok());
    const std::vector<uint8_t> got = Download(cbuf, count_c * 2, 0);
    const std::vector<uint8_t> ha = HostRandom(DType::kFP8, count_a, 21, fill);
    const std::vector<uint8_t> hb = HostRandom(DType::kFP8, count_b, 22, fill);
    const std::vector<uint8_t> hc = HostRandom(DType::kBF16, count_c, 23, 1.0f);
    double max_err = 0, max_ref = 0;
    for (int p = 0; p < c.batch; ++p) {
      for (int64_t i = 0; i < c.m; ++i) {
        for (int64_t j = 0; j < c.n; ++j) {
          double ref = 0;
          for (int64_t l = 0; l < c.k; ++l) {
            // B[l, j] is element j * ldb + l of its [n, k] storage.
            ref += static_cast<double>(LoadAsFloat(ha.data(), DType::kFP8,
                                                   c.offset + p * stride_a + i * c.lda + l)) *
                   LoadAsFloat(hb.data(), DType::kFP8, c.offset + p * stride_b + j * c.ldb + l);
          }
          ref *= static_cast<double>(a_scale) * b_scale;
          const size_t ci = c.offset + p * stride_c + i * c.ldc + j;
          if (c.beta != 0.0f) ref += LoadAsFloat(hc.data(), DType::kBF16, ci);
          const double y = LoadAsFloat(got.data(), DType::kBF16, ci);
          ASSERT_TRUE(std::isfinite(y)) << "C[" << p << "][" << i << "][" << j << "] not written";
          max_err = std::max(max_err, std::fabs(y - ref));
          max_ref = std::max(max_ref, std::fabs(ref));
        }
      }
    }
    ASSERT_GT(max_ref, 0);
    EXPECT_LT(max_err / max_ref, DTypeTolerance(DType::kFP8))
        << "max err " << max_err << " max ref " << max_ref;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaFp8GemmTest,
    ::testing::Values(GemmCase{"square", 128, 128, 128, 128, 128, 128, 1, 0.0f, 0},
                      GemmCase{"padded_ld", 80, 144, 96, 112, 112, 160, 1, 0.0f, 0},
                      GemmCase{"beta1", 48, 64, 32, 32, 32, 64, 1, 1.0f, 0},
                      GemmCase{"batched", 64, 48, 96, 96, 96, 48, 3, 0.0f, 0},
                      GemmCase{"batched_shared_b_beta1", 40, 32, 64, 64, 64, 32, 4, 1.0f, 16},
                      GemmCase{"large_k", 96, 256, 4096, 4096, 4096, 256, 1, 0.0f, 0}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(CudaEngineTest, Fp8IsNeverSummed) {
  const BufferId a = Alloc(0, 64);
  const absl::Status acc = eng().Accumulate(eng().GetStream(0, StreamRole::kCompute, 0), {a, 0, 32},
                                            {a, 32, 32}, DType::kFP8);
  EXPECT_EQ(acc.code(), absl::StatusCode::kInvalidArgument);
  engine::CollectiveArgs args;
  args.dtype = DType::kFP8;
  args.count = 16;
  args.ranks = {{0, eng().GetStream(0, StreamRole::kComm, 0), {a, 0, 16}, {a, 32, 16}}};
  EXPECT_EQ(eng().AllReduce(args).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(eng().Synchronize({0}).ok());
}

class CudaGemmTest : public CudaEngineTest,
                     public ::testing::WithParamInterface<std::tuple<DType, GemmCase>> {};

TEST_P(CudaGemmTest, MatchesFloat64Reference) {
  const DType dtype = std::get<0>(GetParam());
  const GemmCase& c = std::get<1>(GetParam());
  const size_t elem = DTypeSize(dtype);
  const int64_t stride_a = c.batch > 1 ? c.m * c.lda + 32 : 0;
  const int64_t stride_b = c.batch > 1 ? c.k * c.ldb + 16 : 0;
  const int64_t stride_c = c.batch > 1 ? c.m * c.ldc + 8 : 0;
  const size_t count_a = c.offset + (c.batch - 1) * stride_a + c.m * c.lda;
  const size_t count_b = c.offset + (c.batch - 1) * stride_b + c.k * c.ldb;
  const size_t count_c = c.offset + (c.batch - 1) * stride_c + c.m * c.ldc;
  const BufferId a = Alloc(0, count_a * elem);
  const BufferId b = Alloc(0, count_b * elem);
  const BufferId cbuf = Alloc(0, count_c * elem);
  const engine::StreamId stream = eng().GetStream(0, StreamRole::kCompute, 0);
  ASSERT_TRUE(eng().FillRandom(stream, {a, 0, count_a * elem}, dtype, 11, 1.0f).ok());
  ASSERT_TRUE(eng().FillRandom(stream, {b, 0, count_b * elem}, dtype, 12, 1.0f).ok());
  // beta = 0: NaN everywhere, so an element never written stays NaN (and NaN*0
  // would leak through if beta=0 read C). beta = 1: random C.
  if (c.beta == 0.0f) {
    ASSERT_TRUE(eng().FillConstant(stream, {cbuf, 0, count_c * elem}, dtype, NAN).ok());
  } else {
    ASSERT_TRUE(eng().FillRandom(stream, {cbuf, 0, count_c * elem}, dtype, 13, 1.0f).ok());
  }
  const engine::GemmArgs args = CaseGemm(c, dtype, a, b, cbuf, stride_a, stride_b, stride_c);
  for (int run = 0; run < (c.beta == 0.0f ? 2 : 1); ++run) {  // 2nd run: the cached plan
    const absl::Status status = eng().Gemm(stream, args);
    ASSERT_TRUE(status.ok()) << status;
  }
  ASSERT_TRUE(eng().Synchronize({0}).ok());
  const std::vector<uint8_t> got = Download(cbuf, count_c * elem, 0);
  const std::vector<uint8_t> ha = HostRandom(dtype, count_a, 11, 1.0f);
  const std::vector<uint8_t> hb = HostRandom(dtype, count_b, 12, 1.0f);
  const std::vector<uint8_t> hc =
      c.beta == 0.0f ? std::vector<uint8_t>() : HostRandom(dtype, count_c, 13, 1.0f);
  double max_err = 0, max_ref = 0;
  size_t untouched_bad = 0;
  std::vector<bool> inside(count_c, false);
  for (int p = 0; p < c.batch; ++p) {
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double ref = 0;
        for (int64_t l = 0; l < c.k; ++l) {
          ref += static_cast<double>(
                     LoadAsFloat(ha.data(), dtype, c.offset + p * stride_a + i * c.lda + l)) *
                 LoadAsFloat(hb.data(), dtype, c.offset + p * stride_b + l * c.ldb + j);
        }
        const size_t ci = c.offset + p * stride_c + i * c.ldc + j;
        inside[ci] = true;
        if (c.beta != 0.0f) ref += c.beta * LoadAsFloat(hc.data(), dtype, ci);
        const double y = LoadAsFloat(got.data(), dtype, ci);
        ASSERT_TRUE(std::isfinite(y)) << "C[" << p << "][" << i << "][" << j << "] not written";
        max_err = std::max(max_err, std::fabs(y - ref));
        max_ref = std::max(max_ref, std::fabs(ref));
      }
    }
  }
  // Outside the matrices (offset, ld padding, batch gaps) C must be untouched.
  for (size_t i = 0; i < count_c; ++i) {
    if (inside[i]) continue;
    const float y = LoadAsFloat(got.data(), dtype, i);
    const bool ok = c.beta == 0.0f ? std::isnan(y) : y == LoadAsFloat(hc.data(), dtype, i);
    if (!ok) ++untouched_bad;
  }
  EXPECT_EQ(untouched_bad, 0u) << "GEMM wrote outside C";
  ASSERT_GT(max_ref, 0);
  EXPECT_LT(max_err / max_ref, DTypeTolerance(dtype))
      << "max err " << max_err << " max ref " << max_ref;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaGemmTest,
    ::testing::Combine(
        ::testing::Values(DType::kBF16, DType::kF16, DType::kF32),
        ::testing::Values(GemmCase{"square", 128, 128, 128, 128, 128, 128, 1, 0.0f, 0},
                          GemmCase{"nonsquare_ld", 70, 130, 45, 48, 136, 144, 1, 0.0f, 8},
                          GemmCase{"beta1_ld", 33, 65, 17, 24, 72, 80, 1, 1.0f, 0},
                          GemmCase{"batched", 64, 48, 96, 96, 48, 56, 3, 0.0f, 16},
                          GemmCase{"batched_beta1", 40, 72, 24, 32, 72, 80, 4, 1.0f, 8},
                          GemmCase{"large_k", 96, 256, 1024, 1024, 256, 256, 1, 0.0f, 0})),
    [](const auto& info) {
      return DTypeName(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name;
    });

TEST_F(CudaEngineTest, GemmRejectsBadShapesAndRanges) {
  const engine::StreamId stream = eng().GetStream(0, StreamRole::kCompute, 0);
  const BufferId buf = Alloc(0, 64 * 64 * 2);
  engine::GemmArgs args;
  args.dtype = DType::kBF16;
  args.m = args.n = args.k = 64;
  args.a = {buf, 0, 64};
  args.b = {buf, 0, 64};
  args.c = {Alloc(0, 64 * 64 * 2), 0, 64};
  engine::GemmArgs bad_ld = args;
  bad_ld.a.ld = 32;
  absl::Status status = eng().Gemm(stream, bad_ld);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("GEMM a: ld 32"));  // gemm_checks.h
  // C in a buffer of its own, one element past what it holds.
  engine::GemmArgs too_far = args;
  too_far.c = {Alloc(0, 64 * 64 * 2), 1, 64};
  status = eng().Gemm(stream, too_far);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("GEMM C"));
  // C over A in their buffer: refused on every backend.
  engine::GemmArgs overlapping = args;
  overlapping.c = {buf, 0, 64};
  status = eng().Gemm(stream, overlapping);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("output overlaps an input"));
  engine::GemmArgs zero = args;
  zero.k = 0;
  EXPECT_EQ(eng().Gemm(stream, zero).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(eng().Gemm(12345, args).code(), absl::StatusCode::kInvalidArgument);
  engine::GemmArgs unknown = args;
  unknown.b.buffer = 999999;
  EXPECT_EQ(eng().Gemm(stream, unknown).code(), absl::StatusCode::kInvalidArgument);
}

// A GEMM beside a collective runs on SMs - nccl_overlap_ctas SMs (cuBLASLt's SM
// count target): a different kernel configuration, the same product.
TEST_F(CudaEngineTest, GemmBesideACollectiveGivesTheSameProduct) {
  ASSERT_EQ(eng().CollectiveSmBudget(), kNcclCtas);
  ASSERT_GT(eng().MultiprocessorCount(0), kNcclCtas);
  const int64_t m = 512, n = 384, k = 256;
  const DType dtype = DType::kF32;
  const BufferId a = Alloc(0, m * k * 4);
  const BufferId b = Alloc(0, k * n * 4);
  const BufferId c_full = Alloc(0, m * n * 4);
  const BufferId c_part = Alloc(0, m * n * 4);
  const engine::StreamId stream = eng().GetStream(0, StreamRole::kCompute, 1);
  ASSERT_TRUE(eng().FillRandom(stream, {a, 0, size_t(m * k * 4)}, dtype, 5, 1.0f).ok());
  ASSERT_TRUE(eng().FillRandom(stream, {b, 0, size_t(k * n * 4)}, dtype, 6, 1.0f).ok());
  ASSERT_TRUE(eng().FillConstant(stream, {c_part, 0, size_t(m * n * 4)}, dtype, NAN).ok());
  engine::GemmArgs args = DenseGemm(dtype, a, b, c_full, m, n, k);
  ASSERT_TRUE(eng().Gemm(stream, args).ok());
  args.c.buffer = c_part;
  args.beside_collective = true;
  const absl::Status status = eng().Gemm(stream, args);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_TRUE(eng().Synchronize({0}).ok());
  const std::vector<uint8_t> full = Download(c_full, m * n * 4, 0);
  const std::vector<uint8_t> part = Download(c_part, m * n * 4, 0);
  double max_diff = 0, max_abs = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    const double x = LoadAsFloat(full.data(), dtype, i), y = LoadAsFloat(part.data(), dtype, i);
    ASSERT_TRUE(std::isfinite(y)) << i;
    max_diff = std::max(max_diff, std::fabs(x - y));
    max_abs = std::max(max_abs, std::fabs(x));
  }
  EXPECT_LT(max_diff / max_abs, 1e-5);  // fp32 without TF32: only summation order differs
}

// c_on_peer: a GEMM on device 0 stores (beta = 0) and then accumulates
// (beta = 1) straight into a device-1 buffer over peer access; the same GEMM
// stored locally is the reference. Without the flag the peer's C is refused.
TEST_F(CudaEngineTest, GemmStoresIntoAPeersBuffer) {
  REQUIRE_GPUS(2);
  const int64_t m = 256, n = 320, k = 192;
  const DType dtype = DType::kF32;
  const size_t c_bytes = m * n * 4;
  const BufferId a = Alloc(0, m * k * 4);
  const BufferId b = Alloc(0, k * n * 4);
  const BufferId local = Alloc(0, c_bytes);
  const BufferId remote = Alloc(1, c_bytes);
  const engine::StreamId stream = eng().GetStream(0, StreamRole::kCompute, 0);
  ASSERT_TRUE(eng().FillRandom(stream, {a, 0, size_t(m * k * 4)}, dtype, 8, 1.0f).ok());
  ASSERT_TRUE(eng().FillRandom(stream, {b, 0, size_t(k * n * 4)}, dtype, 9, 1.0f).ok());
  ASSERT_TRUE(eng().Synchronize({0}).ok());
  ASSERT_TRUE(eng().FillConstant(eng().GetStream(1, StreamRole::kCompute, 0), {remote, 0, c_bytes},
                                 dtype, NAN)
                  .ok());
  ASSERT_TRUE(eng().Synchronize({1}).ok());
  engine::GemmArgs args = DenseGemm(dtype, a, b, local, m, n, k);
  ASSERT_TRUE(eng().Gemm(stream, args).ok());
  engine::GemmArgs to_peer = args;
  to_peer.c.buffer = remote;
  const absl::Status refused = eng().Gemm(stream, to_peer);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("GEMM C"));
  to_peer.c_on_peer = true;
  ASSERT_TRUE(eng().Gemm(stream, to_peer).ok());  // overwrites the NaN: beta = 0
  to_peer.beta = 1.0f;
  ASSERT_TRUE(eng().Gemm(stream, to_peer).ok());  // reads the peer's C back: twice the product
  ASSERT_TRUE(eng().Synchronize({0, 1}).ok());
  const std::vector<uint8_t> once = Download(local, c_bytes, 0);
  const std::vector<uint8_t> twice = Download(remote, c_bytes, 1);
  double max_diff = 0, max_abs = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    const double x = 2 * LoadAsFloat(once.data(), dtype, i);
    const double y = LoadAsFloat(twice.data(), dtype, i);
    ASSERT_TRUE(std::isfinite(y)) << i;
    max_diff = std::max(max_diff, std::fabs(x - y));
    max_abs = std::max(max_abs, std::fabs(x));
  }
  EXPECT_LT(max_diff / max_abs, 1e-5);
}

TEST_F(CudaEngineTest, EventsTimeWorkOnOneDevice) {
  const engine::StreamId stream = eng().GetStream(0, StreamRole::kCompute, 0);
  absl::StatusOr<engine::EventId> start = eng().CreateEvent(0);
  absl::StatusOr<engine::EventId> end = eng().CreateEvent(0);
  absl::StatusOr<engine::EventId> never = eng().CreateEvent(0);
  ASSERT_TRUE(start.ok() && end.ok() && never.ok());
  const size_t bytes = size_t{256} << 20;
  const BufferId buf = Alloc(0, bytes);
  ASSERT_TRUE(eng().RecordEvent(*start, stream).ok());
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(eng().FillRandom(stream, {buf, 0, bytes}, DType::kF32, i, 1.0f).ok());
  }
  ASSERT_TRUE(eng().RecordEvent(*end, stream).ok());
  // 1 GiB of fills takes far longer than the host takes to ask.
  absl::StatusOr<bool> running = eng().EventDone(*end);
  ASSERT_TRUE(running.ok()) << running.status();
  EXPECT_FALSE(*running);
  EXPECT_TRUE(*eng().EventDone(*never));  // never recorded: done, as cudaEventQuery says
  // A wait on a never-recorded event does nothing.
  EXPECT_TRUE(eng().WaitEvent(eng().GetStream(0, StreamRole::kComm, 0), *never).ok());
  ASSERT_TRUE(eng().Synchronize({0}).ok());
  absl::StatusOr<double> ms = eng().ElapsedMs(*start, *end);
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_GT(*ms, 0.0);
  EXPECT_LT(*ms, 10000.0);
  EXPECT_TRUE(*eng().EventDone(*end));
  EXPECT_EQ(eng().EventDone(424242).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<double> bad = eng().ElapsedMs(*start, *never);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("never recorded"));
  EXPECT_EQ(eng().ElapsedMs(*start, 424242).status().code(), absl::StatusCode::kInvalidArgument);
  eng().DestroyEvent(*start);
  eng().DestroyEvent(*end);
  eng().DestroyEvent(*never);
  EXPECT_EQ(eng().RecordEvent(*start, stream).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaEngineTest, PoolExhaustionIsResourceExhausted) {
  ASSERT_TRUE(eng().Synchronize({0}).ok());  // earlier tests' frees complete
  const int64_t capacity = eng().GetDeviceInfo(0).memory_bytes;
  const int64_t before = eng().Monitor()->MemoryInUse(0);
  absl::StatusOr<BufferId> too_big = eng().Allocate(0, capacity + 1);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(too_big.status().message()), HasSubstr("device 0"));
  EXPECT_THAT(std::string(too_big.status().message()),
              HasSubstr("requested " + std::to_string(capacity + 1)));
  // Fill the pool in halves: the second half fits, a third allocation does not.
  absl::StatusOr<BufferId> half1 = eng().Allocate(0, capacity / 2);
  absl::StatusOr<BufferId> half2 = eng().Allocate(0, capacity / 2 - 4096);
  ASSERT_TRUE(half1.ok() && half2.ok());
  EXPECT_GE(eng().Monitor()->MemoryInUse(0), before + capacity - 4096);
  EXPECT_EQ(eng().Allocate(0, 1 << 20).status().code(), absl::StatusCode::kResourceExhausted);
  // Freed memory is usable again, even with the last use still queued.
  ASSERT_TRUE(eng()
                  .FillRandom(eng().GetStream(0, StreamRole::kCompute, 0),
                              {*half1, 0, size_t(capacity / 2)}, DType::kF32, 1, 1.0f)
                  .ok());
  eng().Free(*half1);
  eng().Free(*half2);
  absl::StatusOr<BufferId> again = eng().Allocate(0, capacity / 2);
  ASSERT_TRUE(again.ok()) << again.status();
  eng().Free(*again);
  ASSERT_TRUE(eng().Synchronize({0}).ok());
  EXPECT_EQ(eng().Monitor()->MemoryInUse(0), before);
  EXPECT_EQ(eng().Allocate(eng().DeviceCount(), 16).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaEngineTest, HostCopiesRoundTripAndCheckRanges) {
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + 3);
  const BufferId buf = Alloc(0, 1024);
  ASSERT_TRUE(eng().CopyFromHost({buf, 24, 1000}, 0, data.data()).ok());
  EXPECT_EQ(Download(buf, 1000, 0, 24), data);
  EXPECT_EQ(eng().CopyFromHost({buf, 25, 1000}, 0, data.data()).code(),
            absl::StatusCode::kInvalidArgument);
  if (eng().DeviceCount() > 1) {
    EXPECT_EQ(eng().CopyToHost(data.data(), {buf, 0, 16}, 1).code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(eng().Synchronize({eng().DeviceCount()}).code(), absl::StatusCode::kInvalidArgument);
}

// ---- Two or more GPUs -------------------------------------------------------

std::vector<int> AllDevices(int n) {
  std::vector<int> devices;
  for (int d = 0; d < n; ++d) devices.push_back(d);
  return devices;
}

TEST_F(CudaEngineTest, AllGatherConcatenatesEveryRankExactly) {
  REQUIRE_GPUS(2);
  const int n = eng().DeviceCount();
  const size_t count = 4099;
  const DType dtype = DType::kBF16;
  const size_t elem = DTypeSize(dtype);
  engine::CollectiveArgs args;
  args.dtype = dtype;
  args.count = count;
  args.channel = 0;
  for (int r = 0; r < n; ++r) {
    engine::RankBuffers rank;
    rank.device = r;
    rank.stream = eng().GetStream(r, StreamRole::kComm, 0);
    rank.send = {Alloc(r, count * elem), 0, count * elem};
    rank.recv = {Alloc(r, n * count * elem), 0, n * count * elem};
    ASSERT_TRUE(eng().FillRandom(rank.stream, rank.send, dtype, 100 + r, 1.0f).ok());
    ASSERT_TRUE(eng().FillConstant(rank.stream, rank.recv, dtype, NAN).ok());
    args.ranks.push_back(rank);
  }
  for (int iteration = 0; iteration < 2; ++iteration) {  // 2nd: the cached communicator
    const absl::Status status = eng().AllGather(args);
    ASSERT_TRUE(status.ok()) << status;
  }
  ASSERT_TRUE(eng().Synchronize(AllDevices(n)).ok());
  std::vector<uint8_t> want;
  for (int r = 0; r < n; ++r) {
    const std::vector<uint8_t> part = HostRandom(dtype, count, 100 + r, 1.0f);
    want.insert(want.end(), part.begin(), part.end());
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(Download(args.ranks[r].recv.buffer, n * count * elem, r), want) << "rank " << r;
  }
}

// Small integers: every sum is exact in any order, so results compare exactly.
std::vector<float> IntPattern(size_t count, int rank) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = static_cast<float>((i * 7 + rank * 3) % 29) - 14;
  return values;
}

std::vector<uint8_t> Encode(const std::vector<float>& values, DType dtype) {
  std::vector<uint8_t> bytes(values.size() * DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) StoreFromFloat(bytes.data(), dtype, i, values[i]);
  return bytes;
}

TEST_F(CudaEngineTest, ReduceScatterAndAllReduceSumExactly) {
  REQUIRE_GPUS(2);
  const int n = eng().DeviceCount();
  const size_t count = 3001;  // per rank for ReduceScatter
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const size_t elem = DTypeSize(dtype);
    engine::CollectiveArgs rs;
    rs.dtype = dtype;
    rs.count = count;
    rs.channel = 1;
    engine::CollectiveArgs ar = rs;
    ar.count = count * n;
    ar.channel = 0;
    std::vector<float> total(count * n, 0.0f);
    for (int r = 0; r < n; ++r) {
      const std::vector<float> values = IntPattern(count * n, r);
      for (size_t i = 0; i < values.size(); ++i) total[i] += values[i];
      const BufferId send = Alloc(r, count * n * elem);
      ASSERT_TRUE(
          eng().CopyFromHost({send, 0, count * n * elem}, r, Encode(values, dtype).data()).ok());
      engine::RankBuffers rank;
      rank.device = r;
      rank.stream = eng().GetStream(r, StreamRole::kComm, 1);
      rank.send = {send, 0, count * n * elem};
      rank.recv = {Alloc(r, count * elem), 0, count * elem};
      rs.ranks.push_back(rank);
      rank.stream = eng().GetStream(r, StreamRole::kComm, 0);
      rank.recv = {Alloc(r, count * n * elem), 0, count * n * elem};
      ar.ranks.push_back(rank);
    }
    // Two channels in flight at once, as an overlap schedule would.
    absl::Status status = eng().ReduceScatter(rs);
    ASSERT_TRUE(status.ok()) << status;
    status = eng().AllReduce(ar);
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_TRUE(eng().Synchronize(AllDevices(n)).ok());
    const std::vector<uint8_t> want_all = Encode(total, dtype);
    for (int r = 0; r < n; ++r) {
      const std::vector<uint8_t> want_part(want_all.begin() + r * count * elem,
                                           want_all.begin() + (r + 1) * count * elem);
      EXPECT_EQ(Download(rs.ranks[r].recv.buffer, count * elem, r), want_part) << "rank " << r;
      EXPECT_EQ(Download(ar.ranks[r].recv.buffer, count * n * elem, r), want_all) << "rank " << r;
    }
  }
}

// An all-reduce pinned to NCCL's ring or tree (a communicator of its own, made
// with NCCL_ALGO set for its init only) sums like NCCL's own choice, and leaves
// NCCL_ALGO unset for everything else. On one GPU it still makes the pinned
// communicator (of one rank); run with NCCL_DEBUG=INFO to see NCCL read it.
TEST_F(CudaEngineTest, AllReducePinnedToRingOrTreeSumsExactly) {
  ASSERT_TRUE(eng().LibraryAlgorithms());
  ASSERT_EQ(std::getenv("NCCL_ALGO"), nullptr) << "run without NCCL_ALGO set";
  const int n = eng().DeviceCount();
  const size_t count = 4099;
  const DType dtype = DType::kBF16;
  const size_t bytes = count * DTypeSize(dtype);
  std::vector<float> total(count, 0.0f);
  engine::CollectiveArgs ar;
  ar.dtype = dtype;
  ar.count = count;
  for (int r = 0; r < n; ++r) {
    const std::vector<float> values = IntPattern(count, r);
    for (size_t i = 0; i < count; ++i) total[i] += values[i];
    const BufferId send = Alloc(r, bytes);
    ASSERT_TRUE(eng().CopyFromHost({send, 0, bytes}, r, Encode(values, dtype).data()).ok());
    engine::RankBuffers rank;
    rank.device = r;
    rank.stream = eng().GetStream(r, StreamRole::kComm, 0);
    rank.send = {send, 0, bytes};
    rank.recv = {Alloc(r, bytes), 0, bytes};
    ar.ranks.push_back(rank);
  }
  for (engine::LibraryAlgorithm algorithm :
       {engine::LibraryAlgorithm::kRing, engine::LibraryAlgorithm::kTree}) {
    ar.algorithm = algorithm;
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(eng().FillConstant(ar.ranks[r].stream, ar.ranks[r].recv, dtype, NAN).ok());
    }
    const absl::Status status = eng().AllReduce(ar);
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_TRUE(eng().Synchronize(AllDevices(n)).ok());
    EXPECT_EQ(std::getenv("NCCL_ALGO"), nullptr) << "the init window must close";
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(Download(ar.ranks[r].recv.buffer, bytes, r), Encode(total, dtype))
          << "rank " << r << (algorithm == engine::LibraryAlgorithm::kRing ? " ring" : " tree");
    }
  }
}

// In place, as NCCL defines it: the all-gather's send is the rank's block of
// recv, the reduce-scatter's recv the rank's block of send, the all-reduce's
// recv its send. With ranks sharing a GPU this checks that the stand-ins never
// overwrite a block a peer has still to read.
TEST_F(CudaEngineTest, CollectivesInPlaceGiveTheSameSums) {
  REQUIRE_GPUS(2);
  const int n = eng().DeviceCount();
  const size_t count = 2053;  // per rank; n * count is not a multiple of n * 2
  const DType dtype = DType::kF32;
  const size_t elem = DTypeSize(dtype);
  std::vector<float> total(count * n, 0.0f), gathered;
  engine::CollectiveArgs ag, rs, ar;
  for (engine::CollectiveArgs* args : {&ag, &rs, &ar}) args->dtype = dtype;
  ag.count = rs.count = count;
  ar.count = count * n;
  std::vector<BufferId> ag_buf(n), rs_buf(n), ar_buf(n);
  for (int r = 0; r < n; ++r) {
    const std::vector<float> values = IntPattern(count * n, r);
    for (size_t i = 0; i < values.size(); ++i) total[i] += values[i];
    const std::vector<uint8_t> bytes = Encode(values, dtype);
    const size_t all = count * n * elem;
    const engine::StreamId stream = eng().GetStream(r, StreamRole::kComm, 0);
    ag_buf[r] = Alloc(r, all);
    rs_buf[r] = Alloc(r, all);
    ar_buf[r] = Alloc(r, all);
    ASSERT_TRUE(eng().FillConstant(stream, {ag_buf[r], 0, all}, dtype, NAN).ok());
    // The rank's own block of the all-gather holds its first `count` values.
    ASSERT_TRUE(
        eng().CopyFromHost({ag_buf[r], r * count * elem, count * elem}, r, bytes.data()).ok());
    gathered.insert(gathered.end(), values.begin(), values.begin() + count);
    ASSERT_TRUE(eng().CopyFromHost({rs_buf[r], 0, all}, r, bytes.data()).ok());
    ASSERT_TRUE(eng().CopyFromHost({ar_buf[r], 0, all}, r, bytes.data()).ok());
    ag.ranks.push_back(
        {r, stream, {ag_buf[r], r * count * elem, count * elem}, {ag_buf[r], 0, all}});
    rs.ranks.push_back(
        {r, stream, {rs_buf[r], 0, all}, {rs_buf[r], r * count * elem, count * elem}});
    ar.ranks.push_back({r, stream, {ar_buf[r], 0, all}, {ar_buf[r], 0, all}});
  }
  absl::Status status = eng().AllGather(ag);
  ASSERT_TRUE(status.ok()) << status;
  status = eng().ReduceScatter(rs);
  ASSERT_TRUE(status.ok()) << status;
  status = eng().AllReduce(ar);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_TRUE(eng().Synchronize(AllDevices(n)).ok());
  const std::vector<uint8_t> want_all = Encode(total, dtype);
  const std::vector<uint8_t> want_gathered = Encode(gathered, dtype);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(Download(ag_buf[r], count * n * elem, r), want_gathered) << "all-gather rank " << r;
    const std::vector<uint8_t> want_part(want_all.begin() + r * count * elem,
                                         want_all.begin() + (r + 1) * count * elem);
    EXPECT_EQ(Download(rs_buf[r], count * elem, r, r * count * elem), want_part)
        << "reduce-scatter rank " << r;
    EXPECT_EQ(Download(ar_buf[r], count * n * elem, r), want_all) << "all-reduce rank " << r;
  }
}

TEST_F(CudaEngineTest, CollectivesRejectBadRanks) {
  REQUIRE_GPUS(2);
  engine::CollectiveArgs args;
  args.dtype = DType::kF32;
  args.count = 16;
  for (int r = 0; r < 2; ++r) {
    engine::RankBuffers rank;
    rank.device = r;
    rank.stream = eng().GetStream(r, StreamRole::kComm, 0);
    rank.send = {Alloc(r, 64), 0, 64};
    rank.recv = {Alloc(r, 128), 0, 128};
    args.ranks.push_back(rank);
  }
  engine::CollectiveArgs wrong_stream = args;
  wrong_stream.ranks[1].stream = eng().GetStream(0, StreamRole::kComm, 0);
  absl::Status status = eng().AllGather(wrong_stream);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("rank 1"));
  engine::CollectiveArgs small_recv = args;
  small_recv.ranks[0].recv.bytes = 64;
  status = eng().AllGather(small_recv);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("rank 0 recv"));
  engine::CollectiveArgs same_device = args;
  same_device.ranks[1] = same_device.ranks[0];
  EXPECT_EQ(eng().AllReduce(same_device).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaEngineTest, SendRecvRingMovesExactBytes) {
  REQUIRE_GPUS(2);
  const int n = eng().DeviceCount();
  const size_t bytes = 12347;  // odd: counted in bytes
  std::vector<BufferId> src(n), dst(n);
  for (int r = 0; r < n; ++r) {
    src[r] = Alloc(r, bytes);
    dst[r] = Alloc(r, bytes + 1);
    // The last byte is whatever the pool held: what was sent is read back below.
    ASSERT_TRUE(eng()
                    .FillRandom(eng().GetStream(r, StreamRole::kComm, 0), {src[r], 0, bytes - 1},
                                DType::kBF16, 300 + r, 1.0f)
                    .ok());
  }
  std::vector<engine::Transfer> transfers;
  for (int r = 0; r < n; ++r) {  // rank r sends to rank r + 1
    const int to = (r + 1) % n;
    engine::Transfer t;
    t.src_device = r;
    t.src_stream = eng().GetStream(r, StreamRole::kComm, 0);
    t.src = {src[r], 0, bytes};
    t.dst_device = to;
    t.dst_stream = eng().GetStream(to, StreamRole::kComm, 0);
    t.dst = {dst[to], 1, bytes};  // odd offset too
    transfers.push_back(t);
  }
  ASSERT_TRUE(eng().Synchronize(AllDevices(n)).ok());
  std::vector<std::vector<uint8_t>> sent(n);
  for (int r = 0; r < n; ++r) sent[r] = Download(src[r], bytes, r);
  const absl::Status status = eng().SendRecv(0, AllDevices(n), transfers, /*beside_gemm=*/false);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_TRUE(eng().Synchronize(AllDevices(n)).ok());
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(Download(dst[(r + 1) % n], bytes, (r + 1) % n, 1), sent[r]) << "from " << r;
  }
  std::vector<engine::Transfer> outside = {transfers[0]};
  EXPECT_EQ(eng().SendRecv(0, {transfers[0].dst_device}, outside, /*beside_gemm=*/false).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaEngineTest, PeerCopyOnEitherDevicesStream) {
  REQUIRE_GPUS(2);
  const size_t bytes = (size_t{32} << 20) + 6;
  const BufferId src = Alloc(0, bytes);
  const BufferId dst = Alloc(1, bytes);
  const BufferId back = Alloc(0, bytes);
  ASSERT_TRUE(eng()
                  .FillRandom(eng().GetStream(0, StreamRole::kComm, 0), {src, 0, bytes},
                              DType::kF16, 7, 1.0f)
                  .ok());
  ASSERT_TRUE(eng().Synchronize({0}).ok());
  // Issued on the source's stream, then back on the destination's stream.
  const engine::StreamId s0 = eng().GetStream(0, StreamRole::kComm, 0);
  const engine::StreamId s1 = eng().GetStream(1, StreamRole::kComm, 0);
  ASSERT_TRUE(eng().PeerCopy(s0, {dst, 0, bytes}, 1, {src, 0, bytes}, 0).ok());
  absl::StatusOr<engine::EventId> copied = eng().CreateEvent(0);
  ASSERT_TRUE(copied.ok());
  ASSERT_TRUE(eng().RecordEvent(*copied, s0).ok());
  ASSERT_TRUE(eng().WaitEvent(s1, *copied).ok());
  ASSERT_TRUE(eng().PeerCopy(s1, {back, 0, bytes}, 0, {dst, 0, bytes}, 1).ok());
  ASSERT_TRUE(eng().Synchronize({0, 1}).ok());
  const std::vector<uint8_t> want = HostRandom(DType::kF16, bytes / 2, 7, 1.0f);
  const std::vector<uint8_t> got = Download(back, bytes, 0);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin()));
  EXPECT_EQ(Download(dst, bytes, 1), got);
  const engine::StreamId s2 =
      eng().DeviceCount() > 2 ? eng().GetStream(2, StreamRole::kComm, 0) : -1;
  if (s2 >= 0) {
    EXPECT_EQ(eng().PeerCopy(s2, {dst, 0, bytes}, 1, {src, 0, bytes}, 0).code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(eng().PeerCopy(s0, {dst, 0, bytes - 1}, 1, {src, 0, bytes}, 0).code(),
            absl::StatusCode::kInvalidArgument);
  eng().DestroyEvent(*copied);
}

TEST_F(CudaEngineTest, CrossDeviceEventOrdersPeerCopyAfterGemm) {
  REQUIRE_GPUS(2);
  const int64_t m = 4096, n = 4096, k = 4096;
  const int batch = 2;  // ~0.3 ms on an H200: long enough to catch a missing wait
  const size_t elem = 2;
  const BufferId a = Alloc(0, batch * m * k * elem);
  const BufferId b = Alloc(0, batch * k * n * elem);
  const BufferId c = Alloc(0, batch * m * n * elem);
  const BufferId copy = Alloc(1, batch * m * n * elem);
  const engine::StreamId compute = eng().GetStream(0, StreamRole::kCompute, 0);
  const engine::StreamId comm1 = eng().GetStream(1, StreamRole::kComm, 0);
  ASSERT_TRUE(eng().FillRandom(compute, {a, 0, batch * m * k * elem}, DType::kBF16, 1, 1.0f).ok());
  ASSERT_TRUE(eng().FillRandom(compute, {b, 0, batch * k * n * elem}, DType::kBF16, 2, 1.0f).ok());
  const engine::GemmArgs args = DenseGemm(DType::kBF16, a, b, c, m, n, k, batch);
  ASSERT_TRUE(eng().Gemm(compute, args).ok());  // tunes the shape outside the timed part
  const BufferRef c_ref{c, 0, batch * m * n * elem};
  const BufferRef copy_ref{copy, 0, batch * m * n * elem};
  ASSERT_TRUE(eng().Synchronize({0, 1}).ok());
  ASSERT_TRUE(eng().FillConstant(compute, c_ref, DType::kBF16, NAN).ok());
  ASSERT_TRUE(eng().FillConstant(comm1, copy_ref, DType::kBF16, NAN).ok());
  absl::StatusOr<engine::EventId> done = eng().CreateEvent(0);
  ASSERT_TRUE(done.ok());
  ASSERT_TRUE(eng().Gemm(compute, args).ok());
  ASSERT_TRUE(eng().RecordEvent(*done, compute).ok());
  ASSERT_TRUE(eng().WaitEvent(comm1, *done).ok());  // device 1 waits on device 0's event
  ASSERT_TRUE(eng().PeerCopy(comm1, copy_ref, 1, c_ref, 0).ok());
  ASSERT_TRUE(eng().Synchronize({0, 1}).ok());
  const std::vector<uint8_t> produced = Download(c, c_ref.bytes, 0);
  const std::vector<uint8_t> copied = Download(copy, copy_ref.bytes, 1);
  size_t nans = 0;
  for (size_t i = 0; i < produced.size() / elem; ++i) {
    if (std::isnan(LoadAsFloat(copied.data(), DType::kBF16, i))) ++nans;
  }
  EXPECT_EQ(nans, 0u) << "the peer copy read C before the GEMM finished";
  EXPECT_TRUE(produced == copied);
  eng().DestroyEvent(*done);
}

// A captured graph spanning both GPUs (GEMM on device 0, then device 1 pulls C
// after a cross-device event wait) replays the chain in order, every launch.
TEST_F(CudaEngineTest, GraphReplaysACrossDeviceChain) {
  REQUIRE_GPUS(2);
  const int64_t m = 4096, n = 4096, k = 4096;
  const size_t elem = 2;
  const BufferId a = Alloc(0, m * k * elem);
  const BufferId b = Alloc(0, k * n * elem);
  const BufferId c = Alloc(0, m * n * elem);
  const BufferId copy = Alloc(1, m * n * elem);
  const engine::StreamId compute = eng().GetStream(0, StreamRole::kCompute, 0);
  const engine::StreamId comm1 = eng().GetStream(1, StreamRole::kComm, 0);
  ASSERT_TRUE(eng().FillRandom(compute, {a, 0, m * k * elem}, DType::kBF16, 3, 1.0f).ok());
  ASSERT_TRUE(eng().FillRandom(compute, {b, 0, k * n * elem}, DType::kBF16, 4, 1.0f).ok());
  const engine::GemmArgs args = DenseGemm(DType::kBF16, a, b, c, m, n, k);
  ASSERT_TRUE(eng().Gemm(compute, args).ok());  // chooses the algorithm: no sync in the capture
  ASSERT_TRUE(eng().Synchronize({0, 1}).ok());
  const std::vector<uint8_t> want = Download(c, m * n * elem, 0);

  const BufferRef c_ref{c, 0, m * n * elem};
  const BufferRef copy_ref{copy, 0, m * n * elem};
  absl::StatusOr<engine::EventId> produced = eng().CreateEvent(0);
  absl::StatusOr<engine::EventId> pulled = eng().CreateEvent(1);
  ASSERT_TRUE(produced.ok() && pulled.ok());
  ASSERT_TRUE(eng().Graphs()->BeginCapture(compute).ok());
  ASSERT_TRUE(eng().Gemm(compute, args).ok());
  ASSERT_TRUE(eng().RecordEvent(*produced, compute).ok());
  ASSERT_TRUE(eng().WaitEvent(comm1, *produced).ok());
  ASSERT_TRUE(eng().PeerCopy(comm1, copy_ref, 1, c_ref, 0).ok());
  ASSERT_TRUE(eng().RecordEvent(*pulled, comm1).ok());
  ASSERT_TRUE(eng().WaitEvent(compute, *pulled).ok());
  absl::StatusOr<engine::GraphId> graph = eng().Graphs()->EndCapture(compute);
  ASSERT_TRUE(graph.ok()) << graph.status();

  for (int launch = 0; launch < 2; ++launch) {
    ASSERT_TRUE(eng().FillConstant(compute, c_ref, DType::kBF16, NAN).ok());
    ASSERT_TRUE(eng().FillConstant(comm1, copy_ref, DType::kBF16, NAN).ok());
    ASSERT_TRUE(eng().Synchronize({0, 1}).ok());
    ASSERT_TRUE(eng().Graphs()->LaunchGraph(*graph, compute).ok());
    ASSERT_TRUE(eng().Synchronize({0, 1}).ok());
    EXPECT_TRUE(Download(c, m * n * elem, 0) == want) << "launch " << launch;
    EXPECT_TRUE(Download(copy, m * n * elem, 1) == want)
        << "launch " << launch << ": device 1 copied C before the GEMM finished";
  }
  // Launched from another device's stream, or unknown: refused, nothing runs.
  EXPECT_EQ(eng().Graphs()->LaunchGraph(*graph, comm1).code(), absl::StatusCode::kInvalidArgument);
  eng().Graphs()->DestroyGraph(*graph);
  EXPECT_EQ(eng().Graphs()->LaunchGraph(*graph, compute).code(),
            absl::StatusCode::kInvalidArgument);
  eng().DestroyEvent(*produced);
  eng().DestroyEvent(*pulled);
}

// One GPU: a capture that forks from the compute stream to the comm stream
// (a copy there) and joins back names the comm stream, and only it, as joined;
// its replays run the GEMM then the copy, each launch.
TEST_F(CudaEngineTest, CaptureNamesTheStreamsItJoined) {
  const int64_t m = 1024, n = 1024, k = 1024;
  const size_t bytes = static_cast<size_t>(m * n * 2);
  const BufferId a = Alloc(0, m * k * 2);
  const BufferId b = Alloc(0, k * n * 2);
  const BufferId c = Alloc(0, bytes);
  const BufferId copy = Alloc(0, bytes);
  const engine::StreamId compute = eng().GetStream(0, StreamRole::kCompute, 0);
  const engine::StreamId comm = eng().GetStream(0, StreamRole::kComm, 0);
  ASSERT_TRUE(eng().FillRandom(compute, {a, 0, m * k * 2}, DType::kBF16, 5, 1.0f).ok());
  ASSERT_TRUE(eng().FillRandom(compute, {b, 0, k * n * 2}, DType::kBF16, 6, 1.0f).ok());
  const engine::GemmArgs args = DenseGemm(DType::kBF16, a, b, c, m, n, k);
  ASSERT_TRUE(eng().Gemm(compute, args).ok());  // chooses the algorithm before the capture
  ASSERT_TRUE(eng().Synchronize({0}).ok());
  const std::vector<uint8_t> want = Download(c, bytes, 0);

  absl::StatusOr<engine::EventId> fork = eng().CreateEvent(0);
  absl::StatusOr<engine::EventId> join = eng().CreateEvent(0);
  ASSERT_TRUE(fork.ok() && join.ok());
  EXPECT_EQ(eng().Graphs()->JoinedStreams(compute).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(eng().Graphs()->BeginCapture(compute).ok());
  absl::StatusOr<std::vector<engine::StreamId>> alone = eng().Graphs()->JoinedStreams(compute);
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_TRUE(alone->empty());
  ASSERT_TRUE(eng().Gemm(compute, args).ok());
  ASSERT_TRUE(eng().RecordEvent(*fork, compute).ok());
  ASSERT_TRUE(eng().WaitEvent(comm, *fork).ok());
  ASSERT_TRUE(eng().PeerCopy(comm, {copy, 0, bytes}, 0, {c, 0, bytes}, 0).ok());
  ASSERT_TRUE(eng().RecordEvent(*join, comm).ok());
  ASSERT_TRUE(eng().WaitEvent(compute, *join).ok());
  absl::StatusOr<std::vector<engine::StreamId>> joined = eng().Graphs()->JoinedStreams(compute);
  absl::StatusOr<engine::GraphId> graph = eng().Graphs()->EndCapture(compute);
  ASSERT_TRUE(joined.ok()) << joined.status();
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(*joined, std::vector<engine::StreamId>{comm});
  for (int launch = 0; launch < 3; ++launch) {
    ASSERT_TRUE(eng().FillConstant(compute, {c, 0, bytes}, DType::kBF16, NAN).ok());
    ASSERT_TRUE(eng().FillConstant(compute, {copy, 0, bytes}, DType::kBF16, NAN).ok());
    ASSERT_TRUE(eng().Graphs()->LaunchGraph(*graph, compute).ok());
    ASSERT_TRUE(eng().Synchronize({0}).ok());
    EXPECT_TRUE(Download(c, bytes, 0) == want) << "launch " << launch;
    EXPECT_TRUE(Download(copy, bytes, 0) == want) << "launch " << launch;
  }
  eng().Graphs()->DestroyGraph(*graph);
  eng().DestroyEvent(*fork);
  eng().DestroyEvent(*join);
}

// A capture left with a stream that never joined back fails at EndCapture with
// the runtime's message, and the engine carries on.
TEST_F(CudaEngineTest, UnjoinedCaptureFailsAndTheEngineCarriesOn) {
  REQUIRE_GPUS(2);
  const size_t bytes = size_t{1} << 20;
  const BufferId src = Alloc(0, bytes);
  const BufferId dst = Alloc(1, bytes);
  const engine::StreamId compute = eng().GetStream(0, StreamRole::kCompute, 0);
  const engine::StreamId comm1 = eng().GetStream(1, StreamRole::kComm, 0);
  absl::StatusOr<engine::EventId> fork = eng().CreateEvent(0);
  ASSERT_TRUE(fork.ok());
  ASSERT_TRUE(eng().Graphs()->BeginCapture(compute).ok());
  ASSERT_TRUE(eng().RecordEvent(*fork, compute).ok());
  ASSERT_TRUE(eng().WaitEvent(comm1, *fork).ok());
  ASSERT_TRUE(eng().PeerCopy(comm1, {dst, 0, bytes}, 1, {src, 0, bytes}, 0).ok());
  absl::StatusOr<engine::GraphId> graph = eng().Graphs()->EndCapture(compute);
  ASSERT_FALSE(graph.ok());
  EXPECT_THAT(std::string(graph.status().message()), HasSubstr("cudaStreamEndCapture"));
  // Both streams work directly again.
  ASSERT_TRUE(eng().FillRandom(compute, {src, 0, bytes}, DType::kF16, 9, 1.0f).ok());
  ASSERT_TRUE(eng().Synchronize({0, 1}).ok());
  ASSERT_TRUE(eng().PeerCopy(comm1, {dst, 0, bytes}, 1, {src, 0, bytes}, 0).ok());
  ASSERT_TRUE(eng().Synchronize({0, 1}).ok());
  EXPECT_EQ(Download(dst, bytes, 1), Download(src, bytes, 0));
  EXPECT_TRUE(eng().Monitor()->Healthy());
  eng().DestroyEvent(*fork);
}

TEST_F(CudaEngineTest, BarrierAndEventsAcrossDevices) {
  REQUIRE_GPUS(2);
  const int n = eng().DeviceCount();
  std::vector<engine::StreamId> streams;
  for (int d = 0; d < n; ++d) streams.push_back(eng().GetStream(d, StreamRole::kComm, 1));
  absl::Status status = eng().Barrier(0, AllDevices(n), streams);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_TRUE(eng().Synchronize(AllDevices(n)).ok());
  EXPECT_EQ(eng().Barrier(0, AllDevices(n), {streams[0]}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(eng().Barrier(0, {0, 0}, {streams[0], streams[0]}).code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<engine::EventId> e0 = eng().CreateEvent(0);
  absl::StatusOr<engine::EventId> e1 = eng().CreateEvent(1);
  ASSERT_TRUE(e0.ok() && e1.ok());
  EXPECT_EQ(eng().RecordEvent(*e0, streams[1]).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(eng().RecordEvent(*e0, streams[0]).ok());
  ASSERT_TRUE(eng().RecordEvent(*e1, streams[1]).ok());
  ASSERT_TRUE(eng().Synchronize({0, 1}).ok());
  EXPECT_EQ(eng().ElapsedMs(*e0, *e1).status().code(), absl::StatusCode::kInvalidArgument);
  eng().DestroyEvent(*e0);
  eng().DestroyEvent(*e1);
  EXPECT_TRUE(eng().Monitor()->Healthy());
}

// The barrier is made of cross-device event waits: device 0 must not pass it
// before device 1 has finished what it queued first (seconds of fills here),
// so the copy device 0 makes right after it sees device 1's final values.
TEST_F(CudaEngineTest, BarrierHoldsEveryRankUntilTheLastArrives) {
  REQUIRE_GPUS(2);
  const size_t count = 1 << 20;
  const size_t bytes = count * sizeof(float);
  const BufferId marker = Alloc(1, bytes), copy = Alloc(0, bytes);
  const BufferId ballast = Alloc(1, size_t{256} << 20);
  const engine::StreamId s0 = eng().GetStream(0, StreamRole::kCompute);
  const engine::StreamId s1 = eng().GetStream(1, StreamRole::kCompute);
  ASSERT_TRUE(eng().FillConstant(s1, {marker, 0, bytes}, DType::kF32, 0.0f).ok());
  ASSERT_TRUE(eng().Synchronize({0, 1}).ok());
  for (int i = 0; i < 200; ++i) {  // ~20 ms of work on device 1 before its marker
    ASSERT_TRUE(eng().FillRandom(s1, {ballast, 0, size_t{256} << 20}, DType::kF32, i, 1.0f).ok());
  }
  ASSERT_TRUE(eng().FillConstant(s1, {marker, 0, bytes}, DType::kF32, 7.0f).ok());
  ASSERT_TRUE(eng().Barrier(0, {0, 1}, {s0, s1}).ok());
  ASSERT_TRUE(eng().PeerCopy(s0, {copy, 0, bytes}, 0, {marker, 0, bytes}, 1).ok());
  ASSERT_TRUE(eng().Synchronize({0, 1}).ok());
  const std::vector<uint8_t> got = Download(copy, bytes, 0);
  std::vector<float> values(count);
  std::memcpy(values.data(), got.data(), bytes);
  EXPECT_EQ(std::count(values.begin(), values.end(), 7.0f), static_cast<long>(count));
}

// A launch gate holds device 0's stream: device 1, not held, copies device 0's
// buffer and sees the fill queued behind the hold not yet run; once released,
// the fill runs. A hold nobody releases lets go after its limit and is counted.
TEST_F(CudaEngineTest, LaunchGateHoldsUntilReleasedOrItsLimit) {
  REQUIRE_GPUS(2);
  ASSERT_NE(eng().Gates(), nullptr);
  const size_t count = 1 << 16;
  const size_t bytes = count * sizeof(float);
  const BufferId buffer = Alloc(0, bytes), peek = Alloc(1, bytes);
  const engine::StreamId s0 = eng().GetStream(0, StreamRole::kCompute);
  const engine::StreamId s1 = eng().GetStream(1, StreamRole::kCompute);
  ASSERT_TRUE(eng().FillConstant(s0, {buffer, 0, bytes}, DType::kF32, 0.0f).ok());
  ASSERT_TRUE(eng().Synchronize({0, 1}).ok());
  const int64_t timeouts = eng().Gates()->GateTimeouts(0);

  absl::StatusOr<int64_t> ticket = eng().Gates()->HoldStreams({s0}, /*max_hold_ms=*/60000);
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  ASSERT_TRUE(eng().FillConstant(s0, {buffer, 0, bytes}, DType::kF32, 7.0f).ok());
  ASSERT_TRUE(eng().PeerCopy(s1, {peek, 0, bytes}, 1, {buffer, 0, bytes}, 0).ok());
  ASSERT_TRUE(eng().Synchronize({1}).ok());
  std::vector<float> values(count);
  std::memcpy(values.data(), Download(peek, bytes, 1).data(), bytes);
  EXPECT_EQ(std::count(values.begin(), values.end(), 0.0f), static_cast<long>(count));
  ASSERT_TRUE(eng().Gates()->ReleaseGate(*ticket).ok());
  ASSERT_TRUE(eng().Synchronize({0}).ok());
  std::memcpy(values.data(), Download(buffer, bytes, 0).data(), bytes);
  EXPECT_EQ(std::count(values.begin(), values.end(), 7.0f), static_cast<long>(count));
  EXPECT_EQ(eng().Gates()->GateTimeouts(0), timeouts);

  absl::StatusOr<engine::EventId> before = eng().CreateEvent(0);
  absl::StatusOr<engine::EventId> after = eng().CreateEvent(0);
  ASSERT_TRUE(before.ok() && after.ok());
  ASSERT_TRUE(eng().RecordEvent(*before, s0).ok());
  ASSERT_TRUE(eng().Gates()->HoldStreams({s0}, /*max_hold_ms=*/30).ok());
  ASSERT_TRUE(eng().RecordEvent(*after, s0).ok());
  ASSERT_TRUE(eng().Synchronize({0}).ok());
  absl::StatusOr<double> held_ms = eng().ElapsedMs(*before, *after);
  ASSERT_TRUE(held_ms.ok()) << held_ms.status();
  EXPECT_GE(*held_ms, 29.0);
  EXPECT_LT(*held_ms, 5000.0);
  EXPECT_EQ(eng().Gates()->GateTimeouts(0), timeouts + 1);
  eng().DestroyEvent(*before);
  eng().DestroyEvent(*after);
  EXPECT_EQ(eng().Gates()->HoldStreams({9999}, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(eng().Monitor()->Healthy());
}

}  // namespace
}  // namespace overlap::cuda
