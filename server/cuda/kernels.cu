#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "common/seeded_random.h"
#include "server/cuda/kernels.h"

namespace overlap::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kVec = 8;  // elements per vector: 8 bytes of fp8, 16 of 16-bit types, 32 of fp32

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
  switch (type) {
    case ElemType::kF32:
      return FillRandomTyped<float>(dst, count, seed, scale, stream);
    case ElemType::kF16:
      return FillRandomTyped<__half>(dst, count, seed, scale, stream);
    case ElemType::kBF16:
      return FillRandomTyped<__nv_bfloat16>(dst, count, seed, scale, stream);
    case ElemType::kFP8:
      return FillRandomTyped<__nv_fp8_e4m3>(dst, count, seed, scale, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchFillConstant(void* dst, ElemType type, size_t count, float value,
                               cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  switch (type) {
    case ElemType::kF32:
      FillConstantKernel<<<Blocks(count), kThreads, 0, stream>>>(static_cast<float*>(dst), count,
                                                                 value);
      break;
    case ElemType::kF16:
      FillConstantKernel<<<Blocks(count), kThreads, 0, stream>>>(static_cast<__half*>(dst), count,
                                                                 value);
      break;
    case ElemType::kBF16:
      FillConstantKernel<<<Blocks(count), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(dst),
                                                                 count, value);
      break;
    case ElemType::kFP8:
      FillConstantKernel<<<Blocks(count), kThreads, 0, stream>>>(static_cast<__nv_fp8_e4m3*>(dst),
                                                                 count, value);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
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

// One thread per output element, grid-stride. Activation codes as
// LaunchElementwise's; fp32 math, then / scale and rounded into Dst.
template <typename Src, typename Dst>
__global__ void ElementwiseKernel(const Src* __restrict__ src, Dst* __restrict__ dst,
                                  size_t rows, size_t src_cols, int activation, float scale) {
  const size_t dst_cols = activation == 2 ? src_cols / 2 : src_cols;
  const size_t count = rows * dst_cols;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    const size_t row = i / dst_cols, col = i % dst_cols;
    const Src* in = src + row * src_cols;
    float x = ToFloat(in[col]);
    if (activation == 1) {  // GELU, tanh approximation (common/activation.h)
      x = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    } else if (activation == 2) {  // SwiGLU: SiLU(gate) x up
      x = x / (1.0f + expf(-x)) * ToFloat(in[col + dst_cols]);
    }
    dst[i] = FromFloat<Dst>(__fdiv_rn(x, scale));
  }
}

template <typename Src>
cudaError_t ElementwiseTo(const void* src, void* dst, ElemType dst_type, size_t rows,
                          size_t src_cols, int activation, float scale, cudaStream_t stream) {
  const size_t count = rows * (activation == 2 ? src_cols / 2 : src_cols);
  const Src* in = static_cast<const Src*>(src);
  switch (dst_type) {
    case ElemType::kF32:
      ElementwiseKernel<<<Blocks(count), kThreads, 0, stream>>>(
          in, static_cast<float*>(dst), rows, src_cols, activation, scale);
      break;
    case ElemType::kF16:
      ElementwiseKernel<<<Blocks(count), kThreads, 0, stream>>>(
          in, static_cast<__half*>(dst), rows, src_cols, activation, scale);
      break;
    case ElemType::kBF16:
      ElementwiseKernel<<<Blocks(count), kThreads, 0, stream>>>(
          in, static_cast<__nv_bfloat16*>(dst), rows, src_cols, activation, scale);
      break;
    case ElemType::kFP8:
      ElementwiseKernel<<<Blocks(count), kThreads, 0, stream>>>(
          in, static_cast<__nv_fp8_e4m3*>(dst), rows, src_cols, activation, scale);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchElementwise(const void* src, ElemType src_type, void* dst, ElemType dst_type,
                              size_t rows, size_t src_cols, int activation, float scale,
                              cudaStream_t stream) {
  if (rows == 0 || src_cols == 0) return cudaSuccess;
  switch (src_type) {
    case ElemType::kF32:
      return ElementwiseTo<float>(src, dst, dst_type, rows, src_cols, activation, scale, stream);
    case ElemType::kF16:
      return ElementwiseTo<__half>(src, dst, dst_type, rows, src_cols, activation, scale, stream);
    case ElemType::kBF16:
      return ElementwiseTo<__nv_bfloat16>(src, dst, dst_type, rows, src_cols, activation, scale,
                                          stream);
    case ElemType::kFP8:
      return ElementwiseTo<__nv_fp8_e4m3>(src, dst, dst_type, rows, src_cols, activation, scale,
                                          stream);
  }
  return cudaErrorInvalidValue;
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
  switch (type) {
    case ElemType::kF32:
      FirstNonFiniteKernel<<<Blocks(count), kThreads, 0, stream>>>(static_cast<const float*>(src),
                                                                   count, first);
      break;
    case ElemType::kF16:
      FirstNonFiniteKernel<<<Blocks(count), kThreads, 0, stream>>>(static_cast<const __half*>(src),
                                                                   count, first);
      break;
    case ElemType::kBF16:
      FirstNonFiniteKernel<<<Blocks(count), kThreads, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(src), count, first);
      break;
    case ElemType::kFP8:  // E4M3 has NaN but no infinity
      FirstNonFiniteKernel<<<Blocks(count), kThreads, 0, stream>>>(
          static_cast<const __nv_fp8_e4m3*>(src), count, first);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
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
