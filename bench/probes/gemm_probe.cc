// gemm_probe: where does a lone GEMM lose time? Times one bf16 GEMM shape, one
// launch per iteration with a host sync in between (as the job runner and the
// PyTorch peers do), through several paths:
//   engine        the CUDA engine (pool memory, low-priority compute stream)
//   engine x10    ten GEMMs between the events, per GEMM
//   raw/default   GemmLt on separate cudaMalloc buffers, a default-priority stream
//   raw/low       the same on a lowest-priority non-blocking stream
// Prints the median of each. Usage: gemm_probe M N K [iterations]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "bench/probes/gemm_util.h"
#include "bench/probes/probe_util.h"
#include "common/config.h"
#include "server/cuda/cuda_engine.h"
#include "server/cuda/gemm_lt.h"
#include "server/cuda/kernels.h"

namespace {

using overlap::bench::Median;

double TimeRaw(int64_t m, int64_t n, int64_t k, int iters, int priority) {
  void* ws;
  const size_t ws_bytes = 64 << 20;
  CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority));
  overlap::bench::Bf16Gemm g;
  g.m = m, g.n = n, g.k = k;
  overlap::bench::AllocateFilled(g, s, 0.01f);
  auto lt = overlap::cuda::GemmLt::Create(0);
  if (!lt.ok()) std::exit(1);
  const overlap::cuda::GemmProblem p = overlap::bench::Problem(g);
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  std::vector<double> t;
  for (int i = 0; i < iters + 5; ++i) {
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK_CUDA(cudaEventRecord(e0, s));
    overlap::bench::RunOrDie(**lt, p, s, ws, ws_bytes);
    CHECK_CUDA(cudaEventRecord(e1, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 5) t.push_back(ms);
  }
  cudaFree(g.a), cudaFree(g.b), cudaFree(g.c), cudaFree(ws);
  cudaStreamDestroy(s);
  return Median(t);
}

double TimeEngine(overlap::engine::Engine& e, int64_t m, int64_t n, int64_t k, int iters,
                  int per_iteration) {
  namespace en = overlap::engine;
  auto a = e.Allocate(0, m * k * 2), b = e.Allocate(0, k * n * 2), c = e.Allocate(0, m * n * 2);
  if (!a.ok() || !b.ok() || !c.ok()) std::exit(1);
  const en::StreamId s = e.GetStream(0, en::StreamRole::kCompute);
  (void)e.FillRandom(s, {*a, 0, size_t(m * k * 2)}, overlap::DType::kBF16, 1, 1.0f);
  (void)e.FillRandom(s, {*b, 0, size_t(k * n * 2)}, overlap::DType::kBF16, 2, 0.01f);
  en::GemmArgs g;
  g.dtype = overlap::DType::kBF16;
  g.m = m, g.n = n, g.k = k;
  g.a = {*a, 0, k}, g.b = {*b, 0, n}, g.c = {*c, 0, n};
  auto e0 = e.CreateEvent(0), e1 = e.CreateEvent(0);
  std::vector<double> t;
  for (int i = 0; i < iters + 5; ++i) {
    (void)e.Synchronize({0});
    (void)e.RecordEvent(*e0, s);
    for (int j = 0; j < per_iteration; ++j) (void)e.Gemm(s, g);
    (void)e.RecordEvent(*e1, s);
    (void)e.Synchronize({0});
    if (i >= 5) t.push_back(*e.ElapsedMs(*e0, *e1) / per_iteration);
  }
  e.Free(*a), e.Free(*b), e.Free(*c);
  return Median(t);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: gemm_probe M N K [iterations]\n");
    return 64;
  }
  const int64_t m = std::atoll(argv[1]), n = std::atoll(argv[2]), k = std::atoll(argv[3]);
  const int iters = argc > 4 ? std::atoi(argv[4]) : 20;
  overlap::DaemonConfig config;
  config.pool_bytes_per_device = int64_t{8} << 30;
  auto engine = overlap::cuda::CreateCudaEngine(config);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", std::string(engine.status().message()).c_str());
    return 1;
  }
  int lo = 0, hi = 0;
  cudaDeviceGetStreamPriorityRange(&lo, &hi);
  const double flops = 2.0 * m * n * k;
  auto row = [&](const char* what, double ms) {
    std::printf("%-12s %6ldx%6ldx%6ld  %8.3f ms  %6.0f TFLOP/s\n", what, long(m), long(n), long(k),
                ms, flops / ms / 1e9);
  };
  row("engine", TimeEngine(**engine, m, n, k, iters, 1));
  row("engine x10", TimeEngine(**engine, m, n, k, iters, 10));
  row("raw/default", TimeRaw(m, n, k, iters, 0));
  row("raw/low", TimeRaw(m, n, k, iters, lo));
  row("engine", TimeEngine(**engine, m, n, k, iters, 1));
  return 0;
}
