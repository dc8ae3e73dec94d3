#include "server/engine/host/host_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "common/activation.h"
#include "common/seeded_random.h"

namespace overlap::engine::host {
namespace {

// Scratch reused by each stream thread across GEMMs.
std::vector<float>& Scratch(int which) {
  thread_local std::vector<float> scratch[3];
  return scratch[which];
}

// Packs a rows x cols matrix with row stride `ld` (elements) into fp32, dense.
void Pack(const uint8_t* base, DType dtype, int64_t rows, int64_t cols, int64_t ld, float* out) {
  const size_t es = DTypeSize(dtype);
  for (int64_t r = 0; r < rows; ++r) ToFloat(base + r * ld * es, dtype, cols, out + r * cols);
}

// Each element type's load and store as float, unaligned; DispatchElement
// hands `fn` the one of a dtype, so that a conversion loop is written once.
struct F32Element {
  static constexpr size_t kSize = 4;
  static float Load(const uint8_t* p) {
    float value;
    std::memcpy(&value, p, kSize);
    return value;
  }
  static void Store(float value, uint8_t* p) { std::memcpy(p, &value, kSize); }
};
template <float (*kToFloat)(uint16_t), uint16_t (*kFromFloat)(float)>
struct HalfElement {
  static constexpr size_t kSize = 2;
  static float Load(const uint8_t* p) {
    uint16_t bits;
    std::memcpy(&bits, p, kSize);
    return kToFloat(bits);
  }
  static void Store(float value, uint8_t* p) {
    const uint16_t bits = kFromFloat(value);
    std::memcpy(p, &bits, kSize);
  }
};
struct Fp8Element {
  static constexpr size_t kSize = 1;
  static float Load(const uint8_t* p) { return Fp8ToFloat(*p); }
  static void Store(float value, uint8_t* p) { *p = FloatToFp8(value); }
};

template <typename Fn>
void DispatchElement(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      return fn(F32Element());
    case DType::kBF16:
      return fn(HalfElement<Bf16ToFloat, FloatToBf16>());
    case DType::kF16:
      return fn(HalfElement<Fp16ToFloat, FloatToFp16>());
    case DType::kFP8:
      return fn(Fp8Element());
  }
}

}  // namespace

void InitBlas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void ToFloat(const uint8_t* src, DType dtype, size_t count, float* dst) {
  DispatchElement(dtype, [&](auto element) {
    for (size_t i = 0; i < count; ++i) dst[i] = element.Load(src + i * element.kSize);
  });
}

void FromFloat(const float* src, DType dtype, size_t count, uint8_t* dst) {
  DispatchElement(dtype, [&](auto element) {
    for (size_t i = 0; i < count; ++i) element.Store(src[i], dst + i * element.kSize);
  });
}

void GemmKernel(const GemmArgs& g, float alpha, const uint8_t* a, const uint8_t* b, uint8_t* c) {
  const size_t es = DTypeSize(g.dtype);
  const DType c_dtype = GemmOutputDType(g.dtype);
  const size_t c_es = DTypeSize(c_dtype);
  const bool b_transposed = WeightsStoredTransposed(g.dtype);  // B is [n, k]
  for (int i = 0; i < g.batch; ++i) {
    const uint8_t* ai = a + (g.a.offset + i * g.stride_a) * es;
    const uint8_t* bi = b + (g.b.offset + i * g.stride_b) * es;
    uint8_t* ci = c + (g.c.offset + i * g.stride_c) * c_es;
    if (g.dtype == DType::kF32) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g.m, g.n, g.k, alpha,
                  reinterpret_cast<const float*>(ai), g.a.ld, reinterpret_cast<const float*>(bi),
                  g.b.ld, g.beta, reinterpret_cast<float*>(ci), g.c.ld);
      continue;
    }
    std::vector<float>& fa = Scratch(0);
    std::vector<float>& fb = Scratch(1);
    std::vector<float>& fc = Scratch(2);
    fa.resize(g.m * g.k);
    fb.resize(g.k * g.n);
    fc.resize(g.m * g.n);
    Pack(ai, g.dtype, g.m, g.k, g.a.ld, fa.data());
    if (b_transposed) {
      Pack(bi, g.dtype, g.n, g.k, g.b.ld, fb.data());
    } else {
      Pack(bi, g.dtype, g.k, g.n, g.b.ld, fb.data());
    }
    // With beta 0, C is never read: it may hold NaN poison.
    if (g.beta != 0.0f) Pack(ci, c_dtype, g.m, g.n, g.c.ld, fc.data());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, b_transposed ? CblasTrans : CblasNoTrans, g.m, g.n,
                g.k, alpha, fa.data(), g.k, fb.data(), b_transposed ? g.k : g.n, g.beta, fc.data(),
                g.n);
    for (int64_t r = 0; r < g.m; ++r) {
      FromFloat(fc.data() + r * g.n, c_dtype, g.n, ci + r * g.c.ld * c_es);
    }
  }
}

// Elementwise kernels work through fp32 blocks of this many elements.
constexpr size_t kBlock = 1 << 16;

void FillRandomKernel(uint8_t* dst, DType dtype, size_t count, uint64_t seed, float scale) {
  const size_t es = DTypeSize(dtype);
  std::vector<float> values(std::min(count, kBlock));
  for (size_t begin = 0; begin < count; begin += kBlock) {
    const size_t n = std::min(kBlock, count - begin);
    for (size_t i = 0; i < n; ++i) values[i] = SeededUniform(seed, begin + i) * scale;
    FromFloat(values.data(), dtype, n, dst + begin * es);
  }
}

void FillConstantKernel(uint8_t* dst, DType dtype, size_t count, float value) {
  const size_t es = DTypeSize(dtype);
  const std::vector<float> values(std::min(count, kBlock), value);
  for (size_t begin = 0; begin < count; begin += kBlock) {
    FromFloat(values.data(), dtype, std::min(kBlock, count - begin), dst + begin * es);
  }
}

void AccumulateKernel(uint8_t* dst, const uint8_t* src, DType dtype, size_t count) {
  SumKernel({dst, src}, dtype, count, dst);
}

void ElementwiseKernel(const ElementwiseArgs& args, const uint8_t* src, uint8_t* dst) {
  const int64_t dst_cols = args.DstCols();
  std::vector<float> in(static_cast<size_t>(args.src_cols)), out(static_cast<size_t>(dst_cols));
  const size_t src_row_bytes = static_cast<size_t>(args.src_cols) * DTypeSize(args.src_dtype);
  const size_t dst_row_bytes = static_cast<size_t>(dst_cols) * DTypeSize(args.dst_dtype);
  for (int64_t row = 0; row < args.rows; ++row) {
    ToFloat(src + row * src_row_bytes, args.src_dtype, in.size(), in.data());
    for (int64_t j = 0; j < dst_cols; ++j) {
      float value = in[j];
      if (args.activation == Activation::kGelu) value = Gelu(value);
      if (args.activation == Activation::kSwiglu) value = Silu(value) * in[j + dst_cols];
      out[j] = value / args.dst_scale;
    }
    FromFloat(out.data(), args.dst_dtype, out.size(), dst + row * dst_row_bytes);
  }
}

void GemmEpilogueKernel(const GemmArgs& g, const uint8_t* c, uint8_t* d) {
  const DType dtype = GemmOutputDType(g.dtype);
  const size_t es = DTypeSize(dtype);
  ElementwiseArgs row;
  row.src_dtype = row.dst_dtype = dtype;
  row.rows = 1;
  row.src_cols = g.n;
  row.activation = g.epilogue;
  for (int64_t i = 0; i < g.m; ++i) {
    ElementwiseKernel(row, c + (g.c.offset + i * g.c.ld) * es, d + (g.d.offset + i * g.d.ld) * es);
  }
}

void SumKernel(const std::vector<const uint8_t*>& inputs, DType dtype, size_t count, uint8_t* out) {
  const size_t es = DTypeSize(dtype);
  std::vector<float> acc(std::min(count, kBlock)), add(acc.size());
  for (size_t begin = 0; begin < count; begin += kBlock) {
    const size_t n = std::min(kBlock, count - begin);
    ToFloat(inputs[0] + begin * es, dtype, n, acc.data());
    for (size_t r = 1; r < inputs.size(); ++r) {
      ToFloat(inputs[r] + begin * es, dtype, n, add.data());
      for (size_t i = 0; i < n; ++i) acc[i] += add[i];
    }
    FromFloat(acc.data(), dtype, n, out + begin * es);
  }
}

}  // namespace overlap::engine::host
