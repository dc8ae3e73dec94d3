#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "common/seeded_random.h"
#include "server/cuda/kernels.h"

namespace overlap::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kVec = 8;  // elements per vector: 8 bytes of fp8, 16 of 16-bit types, 32 of fp32

template <typename T>
struct TypeTag {
  using type = T;
};

// fn(TypeTag<T>{}) for the device type of `type`; `unknown` for any other value.
template <typename Fn, typename R = cudaError_t>
R WithType(ElemType type, Fn&& fn, R unknown = cudaErrorInvalidValue) {
  switch (type) {
    case ElemType::kF32:
      return fn(TypeTag<float>{});
    case ElemType::kF16:
      return fn(TypeTag<__half>{});
    case ElemType::kBF16:
      return fn(TypeTag<__nv_bfloat16>{});
    case ElemType::kFP8:
      return fn(TypeTag<__nv_fp8_e4m3>{});
  }
  return unknown;
}

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
// E4M3, round to nearest even, saturating at +-448 (__NV_SATFINITE), as the
// host's FloatToFp8.
template <>
__device__ __forceinline__ __nv_fp8_e4m3 FromFloat<__nv_fp8_e4m3>(float v) {
  return __nv_fp8_e4m3(v);
}

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ToFloat(__nv_fp8_e4m3 v) { return static_cast<float>(v); }

__device__ __forceinline__ float RandomValue(uint64_t seed, size_t i, float scale) {
  // __fmul_rn: never contracted, so the product rounds exactly as on the host.
  return __fmul_rn(SeededUniform(seed, i), scale);
}

// Each thread writes kVec consecutive elements per step (one or two 16-byte
// stores), the tail is handled element by element by the same grid-stride loop.
template <typename T>
__global__ void FillRandomKernel(T* __restrict__ dst, size_t count, uint64_t seed, float scale,
                                 bool vectorized) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t vec_count = vectorized ? count / kVec : 0;
  for (size_t v = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; v < vec_count;
       v += stride) {
    alignas(16) T out[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j) out[j] = FromFloat<T>(RandomValue(seed, v * kVec + j, scale));
    if constexpr (sizeof(T) == 1) {
      *reinterpret_cast<uint2*>(dst + v * kVec) = *reinterpret_cast<const uint2*>(out);
    } else if constexpr (sizeof(T) == 2) {
      *reinterpret_cast<uint4*>(dst + v * kVec) = *reinterpret_cast<const uint4*>(out);
    } else {
      reinterpret_cast<uint4*>(dst + v * kVec)[0] = reinterpret_cast<const uint4*>(out)[0];
      reinterpret_cast<uint4*>(dst + v * kVec)[1] = reinterpret_cast<const uint4*>(out)[1];
    }
  }
  for (size_t i = vec_count * kVec + blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < count; i += stride) {
    dst[i] = FromFloat<T>(RandomValue(seed, i, scale));
  }
}

template <typename T>
__global__ void FillConstantKernel(T* __restrict__ dst, size_t count, float value) {
  const T v = FromFloat<T>(value);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    dst[i] = v;
  }
}

template <typename T>
__global__ void AccumulateKernel(T* __restrict__ dst, const T* __restrict__ src, size_t count,
                                 bool vectorized) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  constexpr int kPerVec = 16 / sizeof(T);
  size_t done = 0;
  if (vectorized) {
    const size_t vec_count = count / kPerVec;
    for (size_t v = tid; v < vec_count; v += stride) {
      uint4 a = reinterpret_cast<const uint4*>(dst)[v];
      const uint4 b = reinterpret_cast<const uint4*>(src)[v];
      T* ae = reinterpret_cast<T*>(&a);
      const T* be = reinterpret_cast<const T*>(&b);
#pragma unroll
      for (int j = 0; j < kPerVec; ++j) ae[j] = FromFloat<T>(ToFloat(ae[j]) + ToFloat(be[j]));
      reinterpret_cast<uint4*>(dst)[v] = a;
    }
    done = vec_count * kPerVec;
  }
  for (size_t i = done + tid; i < count; i += stride) {
    dst[i] = FromFloat<T>(ToFloat(dst[i]) + ToFloat(src[i]));
  }
}

int Blocks(size_t work_items) {
  // Enough blocks to fill any current GPU several times; the loops are grid-stride.
  const size_t blocks = (work_items + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(blocks, 132 * 16)));
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <typename T>
cudaError_t FillRandomTyped(void* dst, size_t count, uint64_t seed, float scale,
                            cudaStream_t stream) {
  T* typed = static_cast<T*>(dst);
  // An unaligned start sends every element through the scalar tail loop.
  const bool vectorized = Aligned16(dst);
  FillRandomKernel<T><<<Blocks(vectorized ? count / kVec + 1 : count), kThreads, 0, stream>>>(
      typed, count, seed, scale, vectorized);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchFillRandom(void* dst, ElemType type, size_t count, uint64_t seed, float scale,
                             cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  return WithType(type, [&](auto tag) {
    return FillRandomTyped<typename decltype(tag)::type>(dst, count, seed, scale, stream);
  });
}

cudaError_t LaunchFillConstant(void* dst, ElemType type, size_t count, float value,
                               cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  return WithType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    FillConstantKernel<<<Blocks(count), kThreads, 0, stream>>>(static_cast<T*>(dst), count, value);
    return cudaGetLastError();
  });
}

namespace {

template <typename T>
cudaError_t AccumulateTyped(void* dst, const void* src, size_t count, cudaStream_t stream) {
  const bool vectorized = Aligned16(dst) && Aligned16(src);
  AccumulateKernel<T>
      <<<Blocks(vectorized ? count / (16 / sizeof(T)) + 1 : count), kThreads, 0, stream>>>(
          static_cast<T*>(dst), static_cast<const T*>(src), count, vectorized);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchAccumulate(void* dst, const void* src, ElemType type, size_t count,
                             cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  switch (type) {
    case ElemType::kF32:
      return AccumulateTyped<float>(dst, src, count, stream);
    case ElemType::kF16:
      return AccumulateTyped<__half>(dst, src, count, stream);
    case ElemType::kBF16:
      return AccumulateTyped<__nv_bfloat16>(dst, src, count, stream);
    case ElemType::kFP8:
      break;  // fp8 is never summed (engine.h)
  }
  return cudaErrorInvalidValue;
}

namespace {

// The activation of LaunchElementwise's codes, in fp32 (common/activation.h
// has the same formulas). Both kernels below call this one function, so their
// results round alike: activation_bandwidth --check compares them bit for bit.
template <int kActivation>
__device__ __forceinline__ float Activate(float x, float up) {
  if constexpr (kActivation == 1) {  // GELU, tanh approximation
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
  } else if constexpr (kActivation == 2) {  // SwiGLU: SiLU(gate) x up
    return x / (1.0f + expf(-x)) * up;
  } else {
    return x;
  }
}

// The scalar path: one thread per output element, grid-stride, any alignment
// and shape. fp32 math, then / scale and rounded into Dst.
template <typename Src, typename Dst>
__global__ void ElementwiseScalarKernel(const Src* __restrict__ src, Dst* __restrict__ dst,
                                        size_t rows, size_t src_cols, int activation, float scale) {
  const size_t dst_cols = activation == 2 ? src_cols / 2 : src_cols;
  const size_t count = rows * dst_cols;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    const size_t row = i / dst_cols, col = i % dst_cols;
    const Src* in = src + row * src_cols;
    float x = ToFloat(in[col]);
    if (activation == 1) {
      x = Activate<1>(x, 0.0f);
    } else if (activation == 2) {
      x = Activate<2>(x, ToFloat(in[col + dst_cols]));
    }
    dst[i] = FromFloat<Dst>(__fdiv_rn(x, scale));
  }
}

// kCount elements of T moved as the widest accesses their alignment allows:
// min(their bytes, 16), which the vector path's caller checks.
template <int kBytes>
struct AccessWord;
template <>
struct AccessWord<4> {
  using type = unsigned int;
};
template <>
struct AccessWord<8> {
  using type = uint2;
};
template <>
struct AccessWord<16> {
  using type = uint4;
};

template <typename T, int kCount>
struct Pack {
  static constexpr int kBytes = static_cast<int>(sizeof(T)) * kCount;
  static constexpr int kAccess = kBytes < 16 ? kBytes : 16;
  using Word = typename AccessWord<kAccess>::type;
  Word words[kBytes / kAccess];

  __device__ __forceinline__ void Load(const T* p) {
#pragma unroll
    for (int i = 0; i < kBytes / kAccess; ++i) words[i] = reinterpret_cast<const Word*>(p)[i];
  }
  __device__ __forceinline__ void Store(T* p) const {
#pragma unroll
    for (int i = 0; i < kBytes / kAccess; ++i) reinterpret_cast<Word*>(p)[i] = words[i];
  }
  __device__ __forceinline__ float Get(int j) const {
    return ToFloat(reinterpret_cast<const T*>(words)[j]);
  }
  __device__ __forceinline__ void Set(int j, float v) {
    reinterpret_cast<T*>(words)[j] = FromFloat<T>(v);
  }
};

// Output elements per 16-byte vector of dst: 8 bf16/f16, 4 f32, 16 fp8.
template <typename Dst>
constexpr int kWidthOf = 16 / static_cast<int>(sizeof(Dst));

// The vector path: each thread writes whole 16-byte vectors of dst. Rows come
// from blockIdx.y (striding by gridDim.y), vectors within a row from x, so no
// thread divides to find its row. SwiGLU reads a vector's gate and up halves
// from the same row of 2 x dst_cols. Copy and GELU read and write contiguous
// tensors, cut here into rows of dst_cols whatever their real shape; only
// their last row may be shorter (`count` elements in all). A thread works on
// two rows at once, gridDim.y apart, so that twice the loads are in flight.
// x / 1 is x exactly, so the unscaled case skips the IEEE division.
template <typename Src, typename Dst, int kActivation>
struct VectorStep {
  static constexpr int kWidth = kWidthOf<Dst>;
  Pack<Src, kWidth> x, up;

  __device__ __forceinline__ void Load(const Src* in, size_t up_offset) {
    x.Load(in);
    if constexpr (kActivation == 2) up.Load(in + up_offset);
  }
  __device__ __forceinline__ void Store(Dst* out, bool unscaled, float scale) const {
    Pack<Dst, kWidth> y;
#pragma unroll
    for (int j = 0; j < kWidth; ++j) {
      const float value = Activate<kActivation>(x.Get(j), kActivation == 2 ? up.Get(j) : 0.0f);
      y.Set(j, unscaled ? value : __fdiv_rn(value, scale));
    }
    y.Store(out);
  }
};

template <typename Src, typename Dst, int kActivation>
__global__ void __launch_bounds__(kThreads)
    ElementwiseVectorKernel(const Src* __restrict__ src, Dst* __restrict__ dst, size_t rows,
                            size_t dst_cols, size_t count, float scale) {
  constexpr int kWidth = kWidthOf<Dst>;
  const size_t src_cols = kActivation == 2 ? 2 * dst_cols : dst_cols;
  const size_t first = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const bool unscaled = scale == 1.0f;
  auto row_vectors = [&](size_t row) {
    if (row >= rows) return size_t{0};
    const size_t left = count - row * dst_cols;
    return (left < dst_cols ? left : dst_cols) / kWidth;
  };
  for (size_t row = blockIdx.y; row < rows; row += 2 * static_cast<size_t>(gridDim.y)) {
    const size_t next = row + gridDim.y;
    const size_t vectors = row_vectors(row), next_vectors = row_vectors(next);  // next's <= row's
    const Src* in = src + row * src_cols;
    const Src* next_in = src + next * src_cols;
    Dst* out = dst + row * dst_cols;
    Dst* next_out = dst + next * dst_cols;
    for (size_t v = first; v < vectors; v += stride) {
      const bool both = v < next_vectors;
      VectorStep<Src, Dst, kActivation> a, b;
      a.Load(in + v * kWidth, dst_cols);
      if (both) b.Load(next_in + v * kWidth, dst_cols);
      a.Store(out + v * kWidth, unscaled, scale);
      if (both) b.Store(next_out + v * kWidth, unscaled, scale);
    }
  }
}

size_t ElemBytes(ElemType type) {
  return WithType(
      type, [](auto tag) { return sizeof(typename decltype(tag)::type); }, size_t{0});
}

bool AlignedTo(const void* p, size_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

// One full wave of `kernel` on the current device: its SMs times the blocks of
// kThreads that fit on one. The latter is asked once per kernel and kept in
// `per_sm` (every GPU that runs this binary is sm_90).
cudaError_t WaveBlocks(const void* kernel, std::atomic<int>* per_sm, size_t* blocks) {
  if (per_sm->load(std::memory_order_relaxed) == 0) {
    int fit = 0;
    const cudaError_t err =
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kernel, kThreads, 0);
    if (err != cudaSuccess) return err;
    per_sm->store(std::max(fit, 1), std::memory_order_relaxed);
  }
  int device = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  *blocks = static_cast<size_t>(std::max(sms, 1)) * per_sm->load(std::memory_order_relaxed);
  return cudaSuccess;
}

// Copy and GELU are cut into rows of this many vectors (ElementwiseVectorKernel).
constexpr size_t kFlatRowVectors = 4 * kThreads;

template <typename Src, typename Dst, int kActivation>
cudaError_t ElementwiseVector(const void* src, void* dst, size_t rows, size_t dst_cols,
                              size_t count, float scale, cudaStream_t stream) {
  auto* kernel = ElementwiseVectorKernel<Src, Dst, kActivation>;
  static std::atomic<int> per_sm{0};  // one per instantiation: their registers differ
  size_t wave = 0;
  const cudaError_t err = WaveBlocks(reinterpret_cast<const void*>(kernel), &per_sm, &wave);
  if (err != cudaSuccess) return err;
  // As many blocks across a row as its vectors need (up to a wave), the rest of
  // the wave down the rows; gridDim.y is at most 65535.
  const size_t vectors = dst_cols / kWidthOf<Dst>;
  const size_t x = std::max<size_t>(1, std::min((vectors + kThreads - 1) / kThreads, wave));
  const size_t y = std::min({rows, std::max<size_t>(1, wave / x), size_t{65535}});
  kernel<<<dim3(static_cast<unsigned>(x), static_cast<unsigned>(y)), kThreads, 0, stream>>>(
      static_cast<const Src*>(src), static_cast<Dst*>(dst), rows, dst_cols, count, scale);
  return cudaGetLastError();
}

template <typename Src, typename Dst>
cudaError_t ElementwiseOn(ElementwisePath path, const void* src, void* dst, size_t rows,
                          size_t src_cols, int activation, float scale, cudaStream_t stream) {
  const size_t dst_cols = activation == 2 ? src_cols / 2 : src_cols;
  const size_t count = rows * dst_cols;
  if (path == ElementwisePath::kScalar) {
    ElementwiseScalarKernel<<<Blocks(count), kThreads, 0, stream>>>(
        static_cast<const Src*>(src), static_cast<Dst*>(dst), rows, src_cols, activation, scale);
    return cudaGetLastError();
  }
  const size_t flat_cols = std::min(count, kFlatRowVectors * kWidthOf<Dst>);
  const size_t flat_rows = (count + flat_cols - 1) / flat_cols;
  switch (activation) {
    case 0:
      return ElementwiseVector<Src, Dst, 0>(src, dst, flat_rows, flat_cols, count, scale, stream);
    case 1:
      return ElementwiseVector<Src, Dst, 1>(src, dst, flat_rows, flat_cols, count, scale, stream);
    case 2:
      return ElementwiseVector<Src, Dst, 2>(src, dst, rows, dst_cols, count, scale, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

ElementwisePath ElementwisePathFor(const void* src, ElemType src_type, const void* dst,
                                   ElemType dst_type, size_t rows, size_t src_cols,
                                   int activation) {
  const size_t src_bytes = ElemBytes(src_type), dst_bytes = ElemBytes(dst_type);
  if (src_bytes == 0 || dst_bytes == 0) return ElementwisePath::kScalar;
  const size_t width = 16 / dst_bytes;
  const size_t src_access = std::min<size_t>(16, width * src_bytes);
  if (!AlignedTo(dst, 16) || !AlignedTo(src, src_access)) return ElementwisePath::kScalar;
  // SwiGLU's rows each split into whole vectors; the others are one flat row.
  const size_t per_row_or_all = activation == 2 ? src_cols / 2 : rows * src_cols;
  return per_row_or_all % width == 0 ? ElementwisePath::kVector : ElementwisePath::kScalar;
}

cudaError_t LaunchElementwiseOn(ElementwisePath path, const void* src, ElemType src_type, void* dst,
                                ElemType dst_type, size_t rows, size_t src_cols, int activation,
                                float scale, cudaStream_t stream) {
  if (activation < 0 || activation > 2) return cudaErrorInvalidValue;
  if (rows == 0 || src_cols == 0) return cudaSuccess;
  if (path == ElementwisePath::kVector &&
      ElementwisePathFor(src, src_type, dst, dst_type, rows, src_cols, activation) != path) {
    return cudaErrorInvalidValue;
  }
  return WithType(src_type, [&](auto src_tag) {
    return WithType(dst_type, [&](auto dst_tag) {
      using Src = typename decltype(src_tag)::type;
      using Dst = typename decltype(dst_tag)::type;
      return ElementwiseOn<Src, Dst>(path, src, dst, rows, src_cols, activation, scale, stream);
    });
  });
}

cudaError_t LaunchElementwise(const void* src, ElemType src_type, void* dst, ElemType dst_type,
                              size_t rows, size_t src_cols, int activation, float scale,
                              cudaStream_t stream) {
  return LaunchElementwiseOn(
      ElementwisePathFor(src, src_type, dst, dst_type, rows, src_cols, activation), src, src_type,
      dst, dst_type, rows, src_cols, activation, scale, stream);
}

namespace {

// Grid-stride: a thread visits its indices in ascending order, so its first
// hit is its lowest, and one atomic per thread that found one is enough.
template <typename T>
__global__ void FirstNonFiniteKernel(const T* src, size_t count, unsigned long long* first) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    if (!isfinite(ToFloat(src[i]))) {
      atomicMin(first, static_cast<unsigned long long>(i));
      return;
    }
  }
}

}  // namespace

cudaError_t LaunchFirstNonFinite(const void* src, ElemType type, size_t count,
                                 unsigned long long* first, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  // fp8 too: E4M3 has NaN but no infinity.
  return WithType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    FirstNonFiniteKernel<<<Blocks(count), kThreads, 0, stream>>>(static_cast<const T*>(src), count,
                                                                 first);
    return cudaGetLastError();
  });
}

namespace {

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

// volatile: every poll reads host memory again instead of a register.
__global__ void HoldAtGateKernel(const volatile int64_t* opened, int64_t ticket,
                                 uint64_t max_hold_ns, volatile int64_t* timeouts) {
  const uint64_t start = GlobalTimerNs();
  while (*opened < ticket) {
    if (GlobalTimerNs() - start > max_hold_ns) {
      *timeouts = *timeouts + 1;  // one hold per device at a time: no race
      return;
    }
    __nanosleep(256);
  }
}

}  // namespace

cudaError_t LaunchHoldAtGate(const int64_t* opened, int64_t ticket, uint64_t max_hold_ns,
                             int64_t* timeouts, cudaStream_t stream) {
  HoldAtGateKernel<<<1, 1, 0, stream>>>(opened, ticket, max_hold_ns, timeouts);
  return cudaGetLastError();
}

}  // namespace overlap::cuda
