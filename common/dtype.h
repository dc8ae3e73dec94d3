// Element types of layer ops and conversions between them and float.
// Portable: no CUDA headers. bf16 and fp16 are stored as raw 16-bit patterns,
// fp8 (OCP E4M3, CUDA's __nv_fp8_e4m3) as raw bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace overlap {

enum class DType { kF32, kF16, kBF16, kFP8 };

size_t DTypeSize(DType dtype);
std::string DTypeName(DType dtype);  // "fp32" | "fp16" | "bf16" | "fp8"
// Accepts fp32/f32/float32, fp16/f16/float16/half, bf16/bfloat16, fp8/e4m3/fp8_e4m3.
absl::StatusOr<DType> ParseDType(absl::string_view name);
// Verification tolerance on max|y - ref| / max|ref|. An output that is a sum
// of partials from `summed_ranks` ranks, carried between them in the dtype
// (reduce-scatter, all-reduce), is rounded once per rank on its way, as NCCL's
// ring rounds once per hop: its tolerance is at least summed_ranks times the
// dtype's unit roundoff (bf16 2^-8: 1e-2 up to 2 ranks, 0.031 at 8). fp8 ops'
// outputs are bf16 (GemmOutputDType), or fp8 rows copied exactly: bf16's.
double DTypeTolerance(DType dtype, int summed_ranks = 1);

// What a GEMM with inputs of `input` writes, and what the reductions of its
// outputs carry: bf16 for fp8 inputs, as TransformerEngine's fp8 layers keep
// their outputs and reduce-scatter them (NCCL has no fp8 sum worth the
// rounding), the input dtype otherwise.
DType GemmOutputDType(DType input);
// Whether GEMMs of `input` read their weights B transposed, stored [n, k] with
// k contiguous: fp8 tensor cores on Hopper take only that layout ("TN").
bool WeightsStoredTransposed(DType input);

float Bf16ToFloat(uint16_t bits);
uint16_t FloatToBf16(float value);  // round to nearest even
float Fp16ToFloat(uint16_t bits);
uint16_t FloatToFp16(float value);  // round to nearest even
// E4M3's largest finite magnitude.
inline constexpr float kFp8Max = 448.0f;
float Fp8ToFloat(uint8_t bits);
// Round to nearest even; beyond +-448 (kFp8Max) it saturates
// (no infinities in E4M3), as CUDA's __NV_SATFINITE conversion does.
uint8_t FloatToFp8(float value);

// Element `index` of a typed array as float / stored from float.
float LoadAsFloat(const void* data, DType dtype, size_t index);
void StoreFromFloat(void* data, DType dtype, size_t index, float value);

// The deterministic random input value for element `index` of a tensor seeded
// with `seed`: uniform in [-1, 1), identical on every backend (the CUDA fill
// kernel computes the same function), so references can regenerate inputs.
float SeededValue(uint64_t seed, uint64_t index);

}  // namespace overlap
