// Shared by the bench tools that call our GemmLt directly (gemm_probe,
// gemm_algos, piece_edges, rest_bias, heat_ramp): one packed row-major bf16 GEMM,
// C[m, n] = A[m, k] x B[k, n]. Bench code: a failed call ends the program.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "bench/probes/probe_util.h"
#include "server/cuda/gemm_lt.h"
#include "server/cuda/kernels.h"

namespace overlap::bench {

struct Bf16Gemm {
  int64_t m = 0, n = 0, k = 0;
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
};

// Allocates A, B and C on the current device and fills A and B with seeded
// random values (B scaled by `b_scale`, so that sums of k products stay small).
inline void AllocateFilled(Bf16Gemm& g, cudaStream_t stream, float b_scale) {
  CHECK_CUDA(cudaMalloc(&g.a, g.m * g.k * 2));
  CHECK_CUDA(cudaMalloc(&g.b, g.k * g.n * 2));
  CHECK_CUDA(cudaMalloc(&g.c, g.m * g.n * 2));
  using cuda::ElemType;
  CHECK_CUDA(cuda::LaunchFillRandom(g.a, ElemType::kBF16, g.m * g.k, 1, 1.0f, stream));
  CHECK_CUDA(cuda::LaunchFillRandom(g.b, ElemType::kBF16, g.k * g.n, 2, b_scale, stream));
}

// The problem for C's rows [row0, row0 + rows) (all of them by default).
inline cuda::GemmProblem Problem(const Bf16Gemm& g, int64_t row0 = 0, int64_t rows = -1) {
  cuda::GemmProblem p;
  p.type = cuda::ElemType::kBF16;
  p.m = rows < 0 ? g.m : rows;
  p.n = g.n;
  p.k = g.k;
  p.lda = g.k;
  p.ldb = g.n;
  p.ldc = g.n;
  p.a = static_cast<const char*>(g.a) + row0 * g.k * 2;
  p.b = g.b;
  p.c = static_cast<char*>(g.c) + row0 * g.n * 2;
  return p;
}

// Enqueues `p` on `stream`; a first call for a shape tunes, quiescing the device.
inline void RunOrDie(cuda::GemmLt& gemm, const cuda::GemmProblem& p, cudaStream_t stream,
                     void* workspace, size_t workspace_bytes) {
  const absl::Status st = gemm.Run(p, stream, workspace, workspace_bytes, 0, [] {
    return cudaDeviceSynchronize() == cudaSuccess ? absl::OkStatus()
                                                  : absl::InternalError("synchronize");
  });
  if (!st.ok()) {
    std::fprintf(stderr, "gemm: %s\n", std::string(st.message()).c_str());
    std::exit(1);
  }
}

// Overrides g's shape with M N K from argv[1..3] when they are given.
inline void ShapeFromArgs(int argc, char** argv, Bf16Gemm& g) {
  if (argc < 4) return;
  g.m = std::atoll(argv[1]);
  g.n = std::atoll(argv[2]);
  g.k = std::atoll(argv[3]);
}

// One GEMM on device 0 with what timing it takes: its stream, a workspace and
// our GemmLt (rest_bias, heat_ramp). Start() allocates and fills the inputs
// and runs it once, which tunes it.
struct TimedGemm : Bf16Gemm {
  static constexpr size_t kWorkspace = 64 << 20;
  void* workspace = nullptr;
  cudaStream_t stream = nullptr;
  std::unique_ptr<cuda::GemmLt> gemm;

  void Start() {
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    AllocateFilled(*this, stream, 0.05f);
    CHECK_CUDA(cudaMalloc(&workspace, kWorkspace));
    absl::StatusOr<std::unique_ptr<cuda::GemmLt>> created = cuda::GemmLt::Create(0);
    if (!created.ok()) {
      std::fprintf(stderr, "GemmLt: %s\n", std::string(created.status().message()).c_str());
      std::exit(1);
    }
    gemm = std::move(*created);
    Run();
    CHECK_CUDA(cudaStreamSynchronize(stream));
  }
  void Run() const { RunOrDie(*gemm, Problem(*this), stream, workspace, kWorkspace); }
};

}  // namespace overlap::bench
