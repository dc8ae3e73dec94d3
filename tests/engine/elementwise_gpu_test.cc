// LaunchElementwise's two kernels (server/cuda/kernels.h): the vector path and
// the scalar fallback, each against a float64 reference computed on the host
// from the stored inputs, for copy, GELU and SwiGLU, over shapes and offsets
// that must take one path or the other. Also checks that the two paths agree
// bit for bit and that neither writes outside its destination. Needs a GPU and
// skips without one.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/activation.h"
#include "common/dtype.h"
#include "gtest/gtest.h"
#include "server/cuda/kernels.h"

namespace overlap::cuda {
namespace {

#define CHECK_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// Worst |got - ref| / max(|ref|, floor) allowed: the dst type's rounding (half
// an ulp, relative) plus fp32 math well below it. Below the floor (fp16's and
// fp8's smallest normal) spacing is absolute, so the error is measured against it.
struct Tolerance {
  double relative;
  double floor;
};
Tolerance ToleranceFor(DType dst) {
  switch (dst) {
    case DType::kF32:
      return {2e-5, 1e-30};  // tanhf's 2 ulp, amplified where 1 + tanh is small
    case DType::kF16:
      return {std::ldexp(1.0, -10), std::ldexp(1.0, -14)};
    case DType::kBF16:
      return {std::ldexp(1.0, -8), 1e-30};
    case DType::kFP8:
      return {std::ldexp(1.0, -4) * 1.01, std::ldexp(1.0, -6)};
  }
  return {0, 0};
}

enum class Expect { kVector, kScalar };

struct Case {
  std::string name;
  size_t rows;
  size_t src_cols;
  size_t src_offset;  // elements into the allocation: 1 makes it unaligned
  size_t dst_offset;
  Expect path;  // for every dtype pair below (their vectors are 4 to 16 elements)
};

// Shapes whose outputs split into 16-element vectors (fp8's, the widest) take
// the vector path for every dst type; the others must fall back.
std::vector<Case> CasesFor(int activation) {
  std::vector<Case> cases = {
      {"aligned", 64, 2048, 0, 0, Expect::kVector},
      {"more rows than a wave of blocks", 3000, 64, 0, 0, Expect::kVector},
      {"unaligned src", 64, 2048, 1, 0, Expect::kScalar},
      {"unaligned dst", 64, 2048, 0, 1, Expect::kScalar},
      {"large", 1024, 4096, 0, 0, Expect::kVector},
  };
  if (activation == 2) {
    cases.push_back({"odd output columns", 16, 66, 0, 0, Expect::kScalar});
    cases.push_back({"output columns not whole vectors", 7, 26, 0, 0, Expect::kScalar});
  } else {
    // Copy and GELU treat the tensor as flat: odd columns are fine when the
    // whole tensor splits into vectors, and it ends in a partial row of the
    // kernel's own cut.
    cases.push_back({"odd columns, whole vectors in all", 16, 33, 0, 0, Expect::kVector});
    cases.push_back({"partial last cut row", 5, 4000, 0, 0, Expect::kVector});
    cases.push_back({"a tail that is not a vector", 7, 13, 0, 0, Expect::kScalar});
  }
  return cases;
}

struct DeviceFree {
  void operator()(void* p) const { cudaFree(p); }
};
using DeviceBytes = std::unique_ptr<uint8_t, DeviceFree>;

constexpr uint8_t kGuard = 0xAB;  // what the destination's allocation holds around dst
constexpr size_t kSlack = 64;     // bytes of guard after the destination

struct Param {
  DType src;
  DType dst;
  int activation;
  float scale;
};

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  static const char* kActivations[] = {"copy", "gelu", "swiglu"};
  return DTypeName(info.param.src) + "_to_" + DTypeName(info.param.dst) + "_" +
         kActivations[info.param.activation];
}

class ElementwiseGpuTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      cudaGetLastError();
      GTEST_SKIP() << "no GPU visible";
    }
    CHECK_CUDA_OK(cudaSetDevice(0));
    CHECK_CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // The device side of one case: src filled from the host, dst with guards.
  struct Buffers {
    DeviceBytes src, dst;
    const void* in = nullptr;
    void* out = nullptr;
    size_t dst_bytes = 0;
  };

  void Allocate(const Case& c, const std::vector<uint8_t>& src_host, Buffers* b) {
    const Param& p = GetParam();
    const size_t dst_cols = p.activation == 2 ? c.src_cols / 2 : c.src_cols;
    b->dst_bytes = (c.dst_offset + c.rows * dst_cols) * DTypeSize(p.dst) + kSlack;
    void* raw = nullptr;
    CHECK_CUDA_OK(cudaMalloc(&raw, src_host.size()));
    b->src.reset(static_cast<uint8_t*>(raw));
    CHECK_CUDA_OK(cudaMalloc(&raw, b->dst_bytes));
    b->dst.reset(static_cast<uint8_t*>(raw));
    CHECK_CUDA_OK(
        cudaMemcpy(b->src.get(), src_host.data(), src_host.size(), cudaMemcpyHostToDevice));
    b->in = b->src.get() + c.src_offset * DTypeSize(p.src);
    b->out = b->dst.get() + c.dst_offset * DTypeSize(p.dst);
  }

  // Runs `c` on `path` (null: LaunchElementwise's own choice) into freshly
  // guarded memory and returns the destination's bytes, guards included.
  void Run(const Case& c, const Buffers& b, const ElementwisePath* path,
           std::vector<uint8_t>* dst_host) {
    const Param& p = GetParam();
    // On the kernel's own stream: a plain cudaMemset goes on the legacy default
    // stream, which a non-blocking stream does not wait for, and on an H100 the
    // guard fill once landed after the kernel's first rows.
    CHECK_CUDA_OK(cudaMemsetAsync(b.dst.get(), kGuard, b.dst_bytes, stream_));
    const cudaError_t launched =
        path == nullptr
            ? LaunchElementwise(b.in, ToElemType(p.src), b.out, ToElemType(p.dst), c.rows,
                                c.src_cols, p.activation, p.scale, stream_)
            : LaunchElementwiseOn(*path, b.in, ToElemType(p.src), b.out, ToElemType(p.dst), c.rows,
                                  c.src_cols, p.activation, p.scale, stream_);
    CHECK_CUDA_OK(launched);
    CHECK_CUDA_OK(cudaStreamSynchronize(stream_));
    dst_host->resize(b.dst_bytes);
    CHECK_CUDA_OK(cudaMemcpy(dst_host->data(), b.dst.get(), b.dst_bytes, cudaMemcpyDeviceToHost));
  }

  // The worst relative error of `got` (Run's bytes) against float64, and that
  // the guard bytes around the destination are untouched.
  void ExpectMatchesReference(const Case& c, const std::vector<uint8_t>& src_host,
                              const std::vector<uint8_t>& got, const char* path_name) {
    SCOPED_TRACE(path_name);
    const Param& p = GetParam();
    const size_t dst_es = DTypeSize(p.dst);
    const size_t dst_cols = p.activation == 2 ? c.src_cols / 2 : c.src_cols;
    const size_t count = c.rows * dst_cols;
    const uint8_t* src = src_host.data() + c.src_offset * DTypeSize(p.src);
    const uint8_t* dst = got.data() + c.dst_offset * dst_es;
    const Tolerance tol = ToleranceFor(p.dst);
    double worst = 0;
    size_t worst_at = 0;
    for (size_t row = 0; row < c.rows; ++row) {
      for (size_t col = 0; col < dst_cols; ++col) {
        double x = LoadAsFloat(src, p.src, row * c.src_cols + col);
        if (p.activation == 1) x = Gelu(x);
        if (p.activation == 2)
          x = Silu(x) * LoadAsFloat(src, p.src, row * c.src_cols + col + dst_cols);
        const double ref = x / p.scale;
        const size_t i = row * dst_cols + col;
        const double value = LoadAsFloat(dst, p.dst, i);
        const double error = std::abs(value - ref) / std::max(std::abs(ref), tol.floor);
        if (!(error <= worst)) {  // NaN counts as worst
          worst = std::isnan(error) ? INFINITY : error;
          worst_at = i;
        }
      }
    }
    EXPECT_LE(worst, tol.relative) << "at element " << worst_at << " of " << count;
    for (size_t b = 0; b < c.dst_offset * dst_es; ++b) ASSERT_EQ(got[b], kGuard) << "byte " << b;
    for (size_t b = (c.dst_offset + count) * dst_es; b < got.size(); ++b) {
      ASSERT_EQ(got[b], kGuard) << "byte " << b << " after the destination";
    }
  }

  cudaStream_t stream_ = nullptr;
};

TEST_P(ElementwiseGpuTest, BothPathsMatchFloat64AndEachOther) {
  const Param& p = GetParam();
  std::mt19937_64 random(20260507 + p.activation);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  for (const Case& c : CasesFor(p.activation)) {
    SCOPED_TRACE(c.name + ": " + std::to_string(c.rows) + " x " + std::to_string(c.src_cols));
    std::vector<uint8_t> src_host((c.src_offset + c.rows * c.src_cols) * DTypeSize(p.src));
    for (size_t i = 0; i < src_host.size() / DTypeSize(p.src); ++i) {
      StoreFromFloat(src_host.data(), p.src, i, uniform(random));
    }
    Buffers buffers;
    ASSERT_NO_FATAL_FAILURE(Allocate(c, src_host, &buffers));
    const ElementwisePath chosen =
        ElementwisePathFor(buffers.in, ToElemType(p.src), buffers.out, ToElemType(p.dst), c.rows,
                           c.src_cols, p.activation);
    const ElementwisePath expected =
        c.path == Expect::kVector ? ElementwisePath::kVector : ElementwisePath::kScalar;
    EXPECT_EQ(chosen, expected);

    std::vector<uint8_t> automatic, scalar, vector;
    ASSERT_NO_FATAL_FAILURE(Run(c, buffers, nullptr, &automatic));
    ASSERT_NO_FATAL_FAILURE(ExpectMatchesReference(c, src_host, automatic, "chosen path"));
    const ElementwisePath scalar_path = ElementwisePath::kScalar;
    ASSERT_NO_FATAL_FAILURE(Run(c, buffers, &scalar_path, &scalar));
    ASSERT_NO_FATAL_FAILURE(ExpectMatchesReference(c, src_host, scalar, "scalar path"));
    // The paths share their arithmetic: the chosen one rounds exactly as the fallback.
    EXPECT_TRUE(automatic == scalar) << "the chosen path differs from the scalar one";

    if (expected == ElementwisePath::kVector) {
      const ElementwisePath vector_path = ElementwisePath::kVector;
      ASSERT_NO_FATAL_FAILURE(Run(c, buffers, &vector_path, &vector));
      EXPECT_TRUE(vector == scalar) << "the vector path differs from the scalar one";
    } else {
      // Forcing the vector path where it does not fit is refused, not run.
      EXPECT_EQ(LaunchElementwiseOn(ElementwisePath::kVector, buffers.in, ToElemType(p.src),
                                    buffers.out, ToElemType(p.dst), c.rows, c.src_cols,
                                    p.activation, p.scale, stream_),
                cudaErrorInvalidValue);
    }
  }
}

std::vector<Param> AllParams() {
  struct Pair {
    DType src, dst;
    float scale;
  };
  // bf16 -> fp8 carries the chain's per-tensor scale, as EnqueueWiredInput sets it.
  const Pair pairs[] = {{DType::kBF16, DType::kBF16, 1.0f},
                        {DType::kBF16, DType::kFP8, 0.05f},
                        {DType::kF32, DType::kBF16, 1.0f},
                        {DType::kBF16, DType::kF32, 1.0f},
                        {DType::kF16, DType::kF16, 0.5f}};
  std::vector<Param> params;
  for (const Pair& pair : pairs) {
    for (int activation = 0; activation <= 2; ++activation) {
      params.push_back({pair.src, pair.dst, activation, pair.scale});
    }
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Types, ElementwiseGpuTest, ::testing::ValuesIn(AllParams()), ParamName);

// Refused before any CUDA call touches the (null) pointers, so it runs without a GPU too.
TEST(ElementwisePathTest, AnActivationOutsideTheCodesIsRefused) {
  EXPECT_EQ(LaunchElementwise(nullptr, ElemType::kBF16, nullptr, ElemType::kBF16, 4, 16, 3, 1.0f,
                              nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace overlap::cuda
