// Element-wise kernels of the CUDA engine (kernels.cu). Only CUDA runtime types
// here: nvcc never sees abseil. Each launcher enqueues on `stream` of the current
// device and returns cudaGetLastError().
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace overlap {
enum class DType;  // common/dtype.h, which nvcc does not read
}  // namespace overlap

namespace overlap::cuda {

enum class ElemType : int { kF32 = 0, kF16 = 1, kBF16 = 2, kFP8 = 3 };  // kFP8: E4M3

// engine DType -> kernel element type (defined in cuda_engine.cc, host code).
ElemType ToElemType(DType dtype);

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
// its second half). fp32 math (engine_types.h, ElementwiseArgs). Runs the path
// that ElementwisePathFor picks; an activation other than 0-2 is
// cudaErrorInvalidValue.
cudaError_t LaunchElementwise(const void* src, ElemType src_type, void* dst, ElemType dst_type,
                              size_t rows, size_t src_cols, int activation, float scale,
                              cudaStream_t stream);

// The two kernels behind LaunchElementwise, which compute the same values bit
// for bit. kVector: each thread reads and writes whole 16-byte vectors of dst
// (8 bf16 or f16, 4 f32, 16 fp8) and the matching elements of src, at memory
// bandwidth. kScalar: one element per thread, any alignment or shape.
enum class ElementwisePath : int { kScalar = 0, kVector = 1 };

// kVector when dst starts 16-byte aligned, src aligned to its part of a vector
// (16 bytes, or less when its elements are narrower than dst's), and the output
// splits into whole vectors: each row's for SwiGLU, the whole tensor's for copy
// and GELU (their rows are contiguous, so odd column counts do not matter).
ElementwisePath ElementwisePathFor(const void* src, ElemType src_type, const void* dst,
                                   ElemType dst_type, size_t rows, size_t src_cols, int activation);

// LaunchElementwise on a chosen path, for tests and benchmarks: kVector where
// ElementwisePathFor says kScalar is cudaErrorInvalidValue and launches nothing.
cudaError_t LaunchElementwiseOn(ElementwisePath path, const void* src, ElemType src_type, void* dst,
                                ElemType dst_type, size_t rows, size_t src_cols, int activation,
                                float scale, cudaStream_t stream);

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
