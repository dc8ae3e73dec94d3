// gemm_algos: which cuBLASLt algorithm is fastest for one bf16 (or fp8) GEMM
// shape when the GPU is cold (as a quick tuner sees it) and when it has run
// GEMMs for a while (as a training step, or our bench, sees it: the SM clock
// drops under the power limit)? Times every heuristic candidate both ways, then
// our GemmLt's pick. Usage: gemm_algos M N K [sustain_ms] [bf16|fp8]
// fp8: E4M3 inputs over their whole range, B stored [n, k] (the TN layout),
// per-tensor scales in device memory, bf16 out, as the daemon runs them.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/probes/gemm_util.h"
#include "bench/probes/probe_util.h"
#include "common/dtype.h"
#include "common/logging.h"
#include "server/cuda/gemm_lt.h"
#include "server/cuda/kernels.h"
#include "server/engine/engine.h"

namespace {

using overlap::bench::Median;

#define CHECK_LT(x)                                                           \
  do {                                                                        \
    cublasStatus_t s = (x);                                                   \
    if (s != CUBLAS_STATUS_SUCCESS) {                                         \
      std::fprintf(stderr, "%s: status %d\n", #x, static_cast<int>(s));      \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: gemm_algos M N K [sustain_ms] [bf16|fp8]\n");
    return 64;
  }
  const int64_t m = std::atoll(argv[1]), n = std::atoll(argv[2]), k = std::atoll(argv[3]);
  const double sustain_ms = argc > 4 ? std::atof(argv[4]) : 300;
  const bool fp8 = argc > 5 && std::string(argv[5]) == "fp8";
  const size_t ws_bytes = size_t{64} << 20;
  void* ws;
  CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreate(&s));
  overlap::bench::Bf16Gemm g;
  g.m = m, g.n = n, g.k = k;
  overlap::bench::AllocateFilled(g, s, 0.01f);
  // fp8: A's and B's dequantization scales, kGemmScaleAlignment apart as cuBLASLt wants.
  constexpr size_t kScaleStride = overlap::engine::kGemmScaleAlignment / sizeof(float);
  float* scales = nullptr;
  if (fp8) {  // the same buffers, refilled with one-byte values
    using overlap::cuda::ElemType;
    const float fill = overlap::kFp8Max;
    CHECK_CUDA(overlap::cuda::LaunchFillRandom(g.a, ElemType::kFP8, m * k, 1, fill, s));
    CHECK_CUDA(overlap::cuda::LaunchFillRandom(g.b, ElemType::kFP8, k * n, 2, fill, s));
    float values[kScaleStride + 1] = {};
    values[0] = 1.0f / fill;
    values[kScaleStride] = 0.01f / fill;
    CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&scales), sizeof(values)));
    CHECK_CUDA(cudaMemcpy(scales, values, sizeof(values), cudaMemcpyHostToDevice));
  }
  void *a = g.a, *b = g.b, *c = g.c;

  // Row-major C[m,n] = A[m,k] B[k,n] is column-major C^T = B^T A^T.
  cublasLtHandle_t lt;
  CHECK_LT(cublasLtCreate(&lt));
  cublasLtMatmulDesc_t op;
  CHECK_LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtMatrixLayout_t la, lb, lc;
  if (fp8) {  // A' = B stored [n, k]: column-major k x n, read transposed
    const cublasOperation_t transpose = CUBLAS_OP_T;
    CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                            sizeof(transpose)));
    CHECK_LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, k, n, k));
    CHECK_LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, k, m, k));
    const float* a_scale = scales;  // cuBLASLt's B is our A (column-major)
    const float* b_scale = scales + kScaleStride;
    CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scale,
                                            sizeof(b_scale)));
    CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale,
                                            sizeof(a_scale)));
  } else {
    CHECK_LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, n, k, n));
    CHECK_LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, m, k));
  }
  CHECK_LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, m, n));
  cublasLtMatmulPreference_t pref;
  CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t max_ws = ws_bytes;
  CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &max_ws, sizeof(max_ws)));
  cublasLtMatmulHeuristicResult_t results[16] = {};
  int found = 0;
  CHECK_LT(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 16, results, &found));
  const float alpha = 1, beta = 0;
  auto run = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(lt, op, &alpha, b, la, a, lb, &beta, c, lc, c, lc, &algo, ws, ws_bytes,
                          s) == CUBLAS_STATUS_SUCCESS;
  };
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  // One GEMM per timed iteration with a host sync between, as the job runner times.
  auto time_iterations = [&](auto&& launch, int iters) {
    std::vector<double> t;
    for (int i = 0; i < iters; ++i) {
      CHECK_CUDA(cudaEventRecord(e0, s));
      if (!launch()) return -1.0;
      CHECK_CUDA(cudaEventRecord(e1, s));
      CHECK_CUDA(cudaStreamSynchronize(s));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      t.push_back(ms);
    }
    return Median(t);
  };
  // Runs `launch` back to back for about `ms` so that the power state settles.
  auto heat = [&](auto&& launch, double ms) {
    const auto start = std::chrono::steady_clock::now();
    while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
               .count() < ms) {
      for (int i = 0; i < 10; ++i) launch();
      CHECK_CUDA(cudaStreamSynchronize(s));
    }
  };
  // Cold (after idling, clocks recovered) and hot (after `sustain_ms` of back-to-back runs).
  auto cold_and_hot = [&](auto&& launch) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const double cold = time_iterations(launch, 3);
    heat(launch, sustain_ms);
    return std::make_pair(cold, time_iterations(launch, 20));
  };
  const double flops = 2.0 * m * n * k;
  std::printf("GEMM %ldx%ldx%ld %s: %d heuristic candidates\n", long(m), long(n), long(k),
              fp8 ? "fp8" : "bf16", found);
  std::printf("%-4s %10s %10s %8s  %s\n", "#", "cold ms", "hot ms", "hot TF/s", "workspace");
  for (int i = 0; i < found; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    const auto [cold, hot] = cold_and_hot([&] { return run(results[i].algo); });
    std::printf("%-4d %10.3f %10.3f %8.0f  %zu\n", i, cold, hot, flops / hot / 1e9,
                results[i].workspaceSize);
  }
  // cuBLAS's own entry point (what PyTorch's matmul calls), with a 32 MiB workspace;
  // it has no fp8 (PyTorch's _scaled_mm calls cuBLASLt).
  if (!fp8) {
    cublasHandle_t handle;
    if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return 1;
    cublasSetStream(handle, s);
    cublasSetWorkspace(handle, ws, size_t{32} << 20);
    auto launch = [&] {
      return cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, b, CUDA_R_16BF, n, a,
                          CUDA_R_16BF, k, &beta, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
    };
    launch();  // cuBLAS's first-call setup, not timed
    CHECK_CUDA(cudaStreamSynchronize(s));
    const auto [cold, hot] = cold_and_hot(launch);
    std::printf("%-4s %10.3f %10.3f %8.0f  (cublasGemmEx)\n", "blas", cold, hot, flops / hot / 1e9);
    cublasDestroy(handle);
  }
  // Our tuner's pick (GemmLt tunes on first use), hot; its debug line names the candidate kept.
  overlap::GetLogger("cuda")->set_level(spdlog::level::debug);
  auto ours = overlap::cuda::GemmLt::Create(0);
  if (!ours.ok()) return 1;
  overlap::cuda::GemmProblem p = overlap::bench::Problem(g);
  if (fp8) {
    p.type = overlap::cuda::ElemType::kFP8;
    p.ldb = k;
    p.a_scale = scales;
    p.b_scale = scales + kScaleStride;
  }
  auto quiesce = [&] {
    return cudaStreamSynchronize(s) == cudaSuccess ? absl::OkStatus()
                                                   : absl::InternalError("sync");
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto launch_ours = [&] { return (*ours)->Run(p, s, ws, ws_bytes, 0, quiesce).ok(); };
  launch_ours();  // tunes
  heat(launch_ours, sustain_ms);
  const double hot = time_iterations(launch_ours, 20);
  std::printf("%-4s %10s %10.3f %8.0f\n", "ours", "-", hot, flops / hot / 1e9);
  return 0;
}
