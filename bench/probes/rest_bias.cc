// rest_bias: does a GEMM run faster when the GPU rested just before it?
//
// The job runner synchronizes after every timed iteration, and with launch
// gates the GPUs then wait while the host enqueues the next one: ~0.1 ms for a
// replayed graph, 1-2 ms for a large NCCL schedule. Under a power cap an idle
// GPU banks headroom, so a schedule with a long enqueue would be timed after a
// longer rest than one that replays a graph: a bias in the comparison. This
// times one GEMM back to back (no rest) and after rests of R ms, in interleaved
// rounds.
// Usage: rest_bias [M N K [ROUNDS]]   (row-major C[M,N] = A[M,K] x B[K,N], bf16;
// default the per-rank GEMM of gemm_ar 16384x28672x8192 at tp = 2)
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bench/probes/gemm_util.h"
#include "bench/probes/probe_util.h"
#include "server/cuda/gemm_lt.h"
#include "server/cuda/kernels.h"

namespace {

using overlap::bench::Median;
using overlap::bench::TimedGemm;

constexpr int kIterations = 20;

struct Setup : TimedGemm {
  Setup() { m = 16384, n = 8192, k = 14336; }
};

// Median ms of one GEMM. rest_ms < 0: back to back, one sync at the end;
// otherwise each GEMM is synchronized and followed by rest_ms of idle GPU.
double Time(const Setup& s, double rest_ms) {
  std::vector<cudaEvent_t> start(kIterations), end(kIterations);
  for (int i = 0; i < kIterations; ++i) {
    CHECK_CUDA(cudaEventCreate(&start[i]));
    CHECK_CUDA(cudaEventCreate(&end[i]));
  }
  for (int i = 0; i < 5; ++i) s.Run();  // back at speed after the previous variant
  for (int i = 0; i < kIterations; ++i) {
    if (rest_ms >= 0) {
      CHECK_CUDA(cudaStreamSynchronize(s.stream));
      std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(rest_ms * 1000)));
    }
    CHECK_CUDA(cudaEventRecord(start[i], s.stream));
    s.Run();
    CHECK_CUDA(cudaEventRecord(end[i], s.stream));
  }
  CHECK_CUDA(cudaStreamSynchronize(s.stream));
  std::vector<double> ms;
  for (int i = 0; i < kIterations; ++i) {
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, start[i], end[i]));
    ms.push_back(t);
    CHECK_CUDA(cudaEventDestroy(start[i]));
    CHECK_CUDA(cudaEventDestroy(end[i]));
  }
  return Median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  Setup s;
  overlap::bench::ShapeFromArgs(argc, argv, s);
  const int rounds = argc >= 5 ? std::max(1, std::atoi(argv[4])) : 3;
  s.Start();

  const std::vector<double> rests = {-1, 0, 0.1, 0.5, 1, 2};
  std::vector<std::vector<double>> ms(rests.size());
  for (int round = 0; round < rounds; ++round) {
    for (size_t v = 0; v < rests.size(); ++v) ms[v].push_back(Time(s, rests[v]));
  }
  std::printf("GEMM %lldx%lldx%lld bf16, median of %d per variant, %d interleaved rounds\n",
              static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k),
              kIterations, rounds);
  std::printf("%-16s %10s %10s  %s\n", "rest before", "median ms", "vs b2b", "each round");
  const double b2b = Median(ms[0]);
  for (size_t v = 0; v < rests.size(); ++v) {
    const std::string name =
        rests[v] < 0 ? std::string("none (b2b)") : std::to_string(rests[v]).substr(0, 4) + " ms";
    std::printf("%-16s %10.3f %9.1f%% ", name.c_str(), Median(ms[v]),
                100.0 * (Median(ms[v]) / b2b - 1));
    for (double x : ms[v]) std::printf(" %.3f", x);
    std::printf("\n");
  }
  return 0;
}
