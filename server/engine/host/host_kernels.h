// The arithmetic of the host engine, run on stream threads. Pointers are raw
// buffer storage; callers have validated every range. 16-bit types are
// converted to fp32, computed, and rounded back to nearest even.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "server/engine/engine.h"

namespace overlap::engine::host {

// Call once per process before the first Gemm: streams run GEMMs concurrently,
// each on one BLAS thread.
void InitBlas();

void ToFloat(const uint8_t* src, DType dtype, size_t count, float* dst);
void FromFloat(const float* src, DType dtype, size_t count, uint8_t* dst);

// `a`, `b`, `c` are the bases of the buffers that args.a/b/c name; C =
// alpha * A x B + beta * C, alpha being the product of the per-tensor scales.
void GemmKernel(const GemmArgs& args, float alpha, const uint8_t* a, const uint8_t* b, uint8_t* c);
void FillRandomKernel(uint8_t* dst, DType dtype, size_t count, uint64_t seed, float scale);
void FillConstantKernel(uint8_t* dst, DType dtype, size_t count, float value);
void AccumulateKernel(uint8_t* dst, const uint8_t* src, DType dtype, size_t count);
// `src` and `dst` point at the ranges args.src and args.dst name.
void ElementwiseKernel(const ElementwiseArgs& args, const uint8_t* src, uint8_t* dst);
// A GEMM's epilogue (GemmArgs::epilogue): D = activation(C), row by row over
// each one's ld, from C as the GEMM stored it. `c` and `d` are the buffers'
// starts.
void GemmEpilogueKernel(const GemmArgs& args, const uint8_t* c, uint8_t* d);

// out = sum over inputs, elementwise in fp32, in input order.
void SumKernel(const std::vector<const uint8_t*>& inputs, DType dtype, size_t count, uint8_t* out);

}  // namespace overlap::engine::host
