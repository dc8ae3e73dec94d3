// A C ABI over overlapd's own GEMM (server/cuda/gemm_lt.h, GemmLt), for
// timing it from Python beside PyTorch (gemm_vs_torch.py loads it with ctypes).
//
// The GEMM runs exactly as the daemon runs one outside a collective: the same
// cuBLASLt algorithm choice (the heuristic's candidates timed once per shape on
// a quiesced device, a challenger kept over the heuristic's first pick only
// when faster by more than GemmLt::kChallengerMargin), no SM target, and a
// workspace of the daemon's default gemm_workspace_bytes, allocated once per
// handle.
//
// Layouts, row-major like torch tensors, C[m, n] = A[m, k] @ B[k, n]:
//   OVD_GEMM_BF16: A [m, k], B [k, n], C [m, n], all bf16 and contiguous.
//   OVD_GEMM_FP8:  A [m, k] e4m3; B column-major (k x n, i.e. an [n, k] row-major
//                  tensor: the memory torch._scaled_mm's second operand `w.t()`
//                  has); C [m, n] bf16. a_scale and b_scale are device pointers
//                  to one fp32 each (per-tensor scales), or null for 1.
//
// Every call enqueues on `stream` (a cudaStream_t, e.g. torch's
// current_stream().cuda_stream); the first call of a shape blocks while it
// tunes. Results: 0 on success, else an absl::StatusCode value, with the text
// in ovd_gemm_last_error() (per thread). A handle may be used from one thread
// at a time.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { OVD_GEMM_BF16 = 0, OVD_GEMM_FP8 = 1 };

// workspace_bytes < 0: the daemon's default. Null on failure (ovd_gemm_last_error).
void* ovd_gemm_create(int device, int64_t workspace_bytes);
// The same with another challenger margin (a share >= 0; 0 keeps the fastest
// candidate as timed, 1e9 the heuristic's first pick), to compare the rules.
void* ovd_gemm_create_with_margin(int device, int64_t workspace_bytes, double challenger_margin);
int ovd_gemm_run(void* handle, int64_t m, int64_t n, int64_t k, int dtype, const void* a,
                 const void* b, void* c, const float* a_scale, const float* b_scale, void* stream);
void ovd_gemm_destroy(void* handle);
const char* ovd_gemm_last_error(void);
// The handle's workspace, the shapes it has tuned, and the cuBLASLt it runs on
// (cublasLtGetVersion, e.g. 130100 for 13.1.0).
int64_t ovd_gemm_workspace_bytes(void* handle);
int64_t ovd_gemm_cached_shapes(void* handle);
int64_t ovd_gemm_cublaslt_version(void);

#ifdef __cplusplus
}
#endif
