// GemmChain: programmatic edges between GEMM pieces captured on one stream. The
// footprint tests are host logic; the capture tests need a GPU and skip without
// one. Each captured graph is checked twice: its edges (which are programmatic,
// what waits for what) and its replayed results against a float64 reference.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/seeded_random.h"
#include "gtest/gtest.h"
#include "server/cuda/gemm_chain.h"
#include "server/cuda/gemm_lt.h"
#include "server/cuda/kernels.h"

namespace overlap::cuda {
namespace {

GemmFootprint Footprint(const char* a, size_t a_bytes, const char* b, size_t b_bytes, const char* c,
                        size_t c_bytes) {
  GemmFootprint f;
  f.a = {a, a + a_bytes};
  f.b = {b, b + b_bytes};
  f.c = {c, c + c_bytes};
  return f;
}

TEST(GemmFootprintTest, DisjointOutputsSharingInputsDoNotConflict) {
  const char* base = nullptr;
  // Two row pieces: A rows differ, B is shared, C rows differ.
  const GemmFootprint first = Footprint(base + 0, 100, base + 1000, 500, base + 2000, 100);
  const GemmFootprint second = Footprint(base + 100, 100, base + 1000, 500, base + 2100, 100);
  EXPECT_FALSE(first.ConflictsWith(second));
  EXPECT_FALSE(second.ConflictsWith(first));
}

TEST(GemmFootprintTest, EveryHazardOnAWrittenRangeConflicts) {
  const char* base = nullptr;
  const GemmFootprint writer = Footprint(base + 0, 100, base + 1000, 100, base + 2000, 100);
  // Reads what the writer writes (as A, as B), writes what it reads, or writes
  // the same bytes; one byte of overlap is enough.
  const GemmFootprint reads_as_a = Footprint(base + 2099, 10, base + 3000, 10, base + 4000, 10);
  const GemmFootprint reads_as_b = Footprint(base + 3000, 10, base + 2050, 10, base + 4000, 10);
  const GemmFootprint writes_input = Footprint(base + 3000, 10, base + 3100, 10, base + 1090, 20);
  const GemmFootprint same_output = Footprint(base + 3000, 10, base + 3100, 10, base + 2000, 100);
  for (const GemmFootprint* other : {&reads_as_a, &reads_as_b, &writes_input, &same_output}) {
    EXPECT_TRUE(writer.ConflictsWith(*other));
    EXPECT_TRUE(other->ConflictsWith(writer));
  }
  // Touching ends do not overlap: [2000, 2100) and [2100, 2110).
  const GemmFootprint adjacent = Footprint(base + 3000, 10, base + 3100, 10, base + 2100, 10);
  EXPECT_FALSE(writer.ConflictsWith(adjacent));
}

#define CHECK_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// C[m, n] = A[m, k] x B[k, n] (+ beta C), row-major, in pieces of rows.
class GemmChainGpuTest : public ::testing::TestWithParam<DType> {
 protected:
  static constexpr int64_t kM = 512, kN = 256, kK = 128;
  static constexpr size_t kWorkspace = 32 << 20;

  void SetUp() override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      cudaGetLastError();
      GTEST_SKIP() << "no GPU visible";
    }
    dtype_ = GetParam();
    elem_ = DTypeSize(dtype_);
    CHECK_CUDA_OK(cudaSetDevice(0));
    CHECK_CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CHECK_CUDA_OK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
    CHECK_CUDA_OK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    for (void** p : {&a_, &b_, &c_, &other_, &workspaces_[0], &workspaces_[1]}) {
      const size_t bytes = p == &a_       ? kM * kK * elem_
                           : p == &b_     ? kK * kN * elem_
                           : p == &c_     ? kM * kN * elem_
                           : p == &other_ ? 4096
                                          : kWorkspace;
      CHECK_CUDA_OK(cudaMalloc(p, bytes));
    }
    // Rows that all differ, so a piece written to the wrong rows shows.
    host_a_.resize(kM * kK);
    host_b_.resize(kK * kN);
    std::vector<char> a(kM * kK * elem_), b(kK * kN * elem_);
    for (size_t i = 0; i < host_a_.size(); ++i) {
      StoreFromFloat(a.data(), dtype_, i, SeededUniform(11, i));
      host_a_[i] = LoadAsFloat(a.data(), dtype_, i);
    }
    for (size_t i = 0; i < host_b_.size(); ++i) {
      StoreFromFloat(b.data(), dtype_, i, SeededUniform(12, i) * 0.1f);
      host_b_[i] = LoadAsFloat(b.data(), dtype_, i);
    }
    CHECK_CUDA_OK(cudaMemcpy(a_, a.data(), a.size(), cudaMemcpyHostToDevice));
    CHECK_CUDA_OK(cudaMemcpy(b_, b.data(), b.size(), cudaMemcpyHostToDevice));
    auto gemm = GemmLt::Create(0);
    ASSERT_TRUE(gemm.ok()) << gemm.status();
    gemm_ = std::move(*gemm);
  }

  void TearDown() override {
    for (void* p : {a_, b_, c_, other_, workspaces_[0], workspaces_[1]}) cudaFree(p);
    if (event_ != nullptr) cudaEventDestroy(event_);
    if (side_ != nullptr) cudaStreamDestroy(side_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // One GEMM on rows [row0, row0 + rows), bracketed by the chain. Returns the
  // workspace the chain chose.
  int RunPiece(int64_t row0, int64_t rows, float beta) {
    GemmProblem g;
    g.type = dtype_ == DType::kF32   ? ElemType::kF32
             : dtype_ == DType::kF16 ? ElemType::kF16
                                     : ElemType::kBF16;
    g.m = rows;
    g.n = kN;
    g.k = kK;
    g.lda = kK;
    g.ldb = kN;
    g.ldc = kN;
    g.beta = beta;
    g.a = static_cast<const char*>(a_) + row0 * kK * elem_;
    g.b = b_;
    g.c = static_cast<char*>(c_) + row0 * kN * elem_;
    GemmFootprint f;
    f.a = {static_cast<const char*>(g.a), static_cast<const char*>(g.a) + rows * kK * elem_};
    f.b = {static_cast<const char*>(g.b), static_cast<const char*>(g.b) + kK * kN * elem_};
    f.c = {static_cast<const char*>(g.c), static_cast<const char*>(g.c) + rows * kN * elem_};
    absl::StatusOr<int> workspace = chain_.Before(stream_, f);
    EXPECT_TRUE(workspace.ok()) << workspace.status();
    if (!workspace.ok()) return -1;
    absl::Status run = gemm_->Run(g, stream_, workspaces_[*workspace], kWorkspace, 0, [] {
      return cudaDeviceSynchronize() == cudaSuccess ? absl::OkStatus()
                                                    : absl::InternalError("synchronize");
    });
    EXPECT_TRUE(run.ok()) << run;
    absl::Status after = chain_.After(stream_);
    EXPECT_TRUE(after.ok()) << after;
    return *workspace;
  }

  // Pieces of equal rows covering C, run eagerly once first: the GEMM tunes each
  // shape on its first call, which a capture cannot hold.
  void WarmPieces(int pieces) {
    for (int p = 0; p < pieces; ++p) RunPiece(p * kM / pieces, kM / pieces, 0.0f);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  }

  void BeginCapture() {
    ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  }
  cudaGraph_t EndCapture() {
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
    return graph;
  }

  static int CountEdges(cudaGraph_t graph, cudaGraphDependencyType type) {
    size_t count = 0;
    EXPECT_EQ(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &count), cudaSuccess);
    std::vector<cudaGraphNode_t> from(count), to(count);
    std::vector<cudaGraphEdgeData> data(count);
    EXPECT_EQ(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &count), cudaSuccess);
    int n = 0;
    for (const cudaGraphEdgeData& d : data) n += d.type == type ? 1 : 0;
    return n;
  }

  // Replays `graph` on C poisoned with NaN, then checks C = times * A x B.
  void ReplayAndCheck(cudaGraph_t graph, float times) {
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int replay = 0; replay < 2; ++replay) {
      // Zero for accumulating graphs, NaN for the others: every element rewritten.
      ASSERT_EQ(cudaMemset(c_, times > 1 ? 0 : 0xff, kM * kN * elem_), cudaSuccess);
      ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      CheckC(times);
    }
    cudaGraphExecDestroy(exec);
  }

  void CheckC(float times) {
    std::vector<char> c(kM * kN * elem_);
    ASSERT_EQ(cudaMemcpy(c.data(), c_, c.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    double worst = 0, largest = 0;
    for (int64_t i = 0; i < kM; ++i) {
      for (int64_t j = 0; j < kN; ++j) {
        double ref = 0;
        for (int64_t l = 0; l < kK; ++l) {
          ref += static_cast<double>(host_a_[i * kK + l]) * host_b_[l * kN + j];
        }
        ref *= times;
        const double got = LoadAsFloat(c.data(), dtype_, i * kN + j);
        const double diff = std::fabs(got - ref);
        worst = std::isnan(diff) ? INFINITY : std::max(worst, diff);
        largest = std::max(largest, std::fabs(ref));
      }
    }
    const double tolerance = dtype_ == DType::kF32 ? 1e-4 : dtype_ == DType::kF16 ? 5e-3 : 1e-2;
    EXPECT_LE(worst / largest, tolerance) << DTypeName(dtype_);
  }

  DType dtype_ = DType::kF32;
  size_t elem_ = 4;
  cudaStream_t stream_ = nullptr, side_ = nullptr;
  cudaEvent_t event_ = nullptr;
  void *a_ = nullptr, *b_ = nullptr, *c_ = nullptr, *other_ = nullptr;
  void* workspaces_[2] = {nullptr, nullptr};
  std::vector<float> host_a_, host_b_;
  std::unique_ptr<GemmLt> gemm_;
  GemmChain chain_;
};

TEST_P(GemmChainGpuTest, EagerLaunchesKeepStreamOrderAndOneWorkspace) {
  for (int p = 0; p < 4; ++p) EXPECT_EQ(RunPiece(p * kM / 4, kM / 4, 0.0f), 0);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  CheckC(1);
}

TEST_P(GemmChainGpuTest, PiecesAreChainedAndWhatFollowsWaitsForTheLastTwo) {
  WarmPieces(4);
  BeginCapture();
  std::vector<int> workspaces;
  for (int p = 0; p < 4; ++p) workspaces.push_back(RunPiece(p * kM / 4, kM / 4, 0.0f));
  // A kernel after the chain must wait for the last piece and the one before
  // it, which the programmatic edge alone would not hold it for.
  ASSERT_EQ(LaunchFillConstant(other_, ElemType::kF32, 16, 1.0f, stream_), cudaSuccess);
  cudaStreamCaptureStatus status;
  const cudaGraphNode_t* deps = nullptr;
  size_t count = 0;
  ASSERT_EQ(cudaStreamGetCaptureInfo(stream_, &status, nullptr, nullptr, &deps, nullptr, &count),
            cudaSuccess);
  ASSERT_EQ(count, 1u);
  size_t fill_deps = 0;
  ASSERT_EQ(cudaGraphNodeGetDependencies(deps[0], nullptr, nullptr, &fill_deps), cudaSuccess);
  EXPECT_EQ(fill_deps, 2u);
  cudaGraph_t graph = EndCapture();
  ASSERT_NE(graph, nullptr);
  // Two at a time may run: they alternate workspaces.
  EXPECT_EQ(workspaces, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(CountEdges(graph, cudaGraphDependencyTypeProgrammatic), 3);
  ReplayAndCheck(graph, 1);
  cudaGraphDestroy(graph);
}

TEST_P(GemmChainGpuTest, ARecordBetweenPiecesKeepsTheChainAndWaitsOnlyForWhatCameBefore) {
  WarmPieces(2);
  BeginCapture();
  RunPiece(0, kM / 2, 0.0f);
  ASSERT_EQ(cudaEventRecord(event_, stream_), cudaSuccess);
  RunPiece(kM / 2, kM / 2, 0.0f);
  ASSERT_EQ(cudaStreamWaitEvent(side_, event_, 0), cudaSuccess);
  ASSERT_EQ(LaunchFillConstant(other_, ElemType::kF32, 16, 1.0f, side_), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event_, side_), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(stream_, event_, 0), cudaSuccess);  // join the side stream
  cudaGraph_t graph = EndCapture();
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(CountEdges(graph, cudaGraphDependencyTypeProgrammatic), 1);
  ReplayAndCheck(graph, 1);
  cudaGraphDestroy(graph);
}

TEST_P(GemmChainGpuTest, AKernelBetweenPiecesBreaksTheChain) {
  WarmPieces(2);
  BeginCapture();
  RunPiece(0, kM / 2, 0.0f);
  ASSERT_EQ(LaunchFillConstant(other_, ElemType::kF32, 16, 1.0f, stream_), cudaSuccess);
  EXPECT_EQ(RunPiece(kM / 2, kM / 2, 0.0f), 0);
  cudaGraph_t graph = EndCapture();
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(CountEdges(graph, cudaGraphDependencyTypeProgrammatic), 0);
  ReplayAndCheck(graph, 1);
  cudaGraphDestroy(graph);
}

TEST_P(GemmChainGpuTest, AccumulatingIntoTheSameOutputKeepsFullEdges) {
  RunPiece(0, kM, 0.0f);
  RunPiece(0, kM, 1.0f);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  BeginCapture();
  RunPiece(0, kM, 1.0f);  // C += A x B, twice, on zeros
  EXPECT_EQ(RunPiece(0, kM, 1.0f), 0);
  cudaGraph_t graph = EndCapture();
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(CountEdges(graph, cudaGraphDependencyTypeProgrammatic), 0);
  ReplayAndCheck(graph, 2);
  cudaGraphDestroy(graph);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GemmChainGpuTest,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace overlap::cuda
