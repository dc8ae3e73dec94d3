// Element-wise kernels of the CUDA engine (kernels.cu). Only CUDA runtime types
// here: nvcc never sees abseil. Each launcher enqueues on `stream` of the current
// device and returns cudaGetLastError().
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace overlap::cuda {

enum class ElemType : int { kF32 = 0, kF16 = 1, kBF16 = 2, kFP8 = 3 };  // kFP8: E4M3

// dst[i] = SeededUniform(seed, i) * scale, rounded to nearest even into the type:
// bit-identical to the host's StoreFromFloat(SeededUniform(seed, i) * scale).
cudaError_t LaunchFillRandom(void* dst, ElemType type, size_t count, uint64_t seed, float scale,
                             cudaStream_t stream);
cudaError_t LaunchFillConstant(void* dst, ElemType type, size_t count, float value,
                               cudaStream_t stream);
// dst[i] = dst[i] + src[i] in fp32, rounded back into the type.
cudaError_t LaunchAccumulate(void* dst, const void* src, ElemType type, size_t count,
                             cudaStream_t stream);

// dst = activation(src) / scale, rounded into dst_type; src holds `rows` rows of
// `src_cols`, dst rows of src_cols (activation 0: none, 1: GELU, tanh
// approximation) or src_cols / 2 (2: SwiGLU, SiLU of a row's first half times
// its second half). fp32 math (engine_types.h, ElementwiseArgs).
cudaError_t LaunchElementwise(const void* src, ElemType src_type, void* dst, ElemType dst_type,
                              size_t rows, size_t src_cols, int activation, float scale,
                              cudaStream_t stream);

// *first = the lowest index of an element of src that is not finite, if lower
// than what it holds; the caller sets *first (device memory) to ~0 before.
cudaError_t LaunchFirstNonFinite(const void* src, ElemType type, size_t count,
                                 unsigned long long* first, cudaStream_t stream);

// Holds `stream` until *opened >= ticket (mapped, pinned host memory that the
// host writes) or until `max_hold_ns` of the GPU's global timer have passed, in
// which case it adds one to *timeouts. One thread; launch_gate.h says why.
cudaError_t LaunchHoldAtGate(const int64_t* opened, int64_t ticket, uint64_t max_hold_ns,
                             int64_t* timeouts, cudaStream_t stream);

}  // namespace overlap::cuda
