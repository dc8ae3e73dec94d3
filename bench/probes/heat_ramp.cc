// heat_ramp: how long does a rested GPU stay fast once GEMMs start again?
//
// The job runner heats the GPUs with the op's GEMM for preheat_ms before each
// measured phase (job_runner.h), so that no phase starts rested. This measures
// what that length should be: after REST_MS of idle GPU, one GEMM runs back to
// back for 2 s, each timed with its own events, and the times are reported by
// how long after the rest the GEMM started (buckets of elapsed GPU time).
// Usage: heat_ramp [M N K [ROUNDS [REST_MS]]]   (bf16, row-major; default the
// per-rank GEMM of ag_gemm 8192x8192x28672 at tp = 2)
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "bench/probes/gemm_util.h"
#include "bench/probes/probe_util.h"
#include "server/cuda/gemm_lt.h"

namespace {

using overlap::bench::Median;
using overlap::bench::TimedGemm;

constexpr double kRunMs = 2000;
// Bucket upper edges, ms of GPU time since the first GEMM after the rest began.
const std::vector<double> kEdges = {25, 50, 100, 200, 300, 500, 1000, 1500, 2000};

struct Setup : TimedGemm {
  Setup() { m = 8192, n = 14336, k = 8192; }
};

// One round: rest, then GEMMs back to back until kRunMs of GPU time; per
// bucket, the median GEMM time of those that started in it.
std::vector<double> Round(const Setup& s, double rest_ms, double gemm_ms) {
  const int count = static_cast<int>(kRunMs / gemm_ms) + 1;
  std::vector<cudaEvent_t> events(count + 1);
  for (cudaEvent_t& event : events) CHECK_CUDA(cudaEventCreate(&event));
  CHECK_CUDA(cudaStreamSynchronize(s.stream));
  std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(rest_ms * 1000)));
  CHECK_CUDA(cudaEventRecord(events[0], s.stream));
  for (int i = 0; i < count; ++i) {
    s.Run();
    CHECK_CUDA(cudaEventRecord(events[i + 1], s.stream));
  }
  CHECK_CUDA(cudaStreamSynchronize(s.stream));
  std::vector<std::vector<double>> buckets(kEdges.size());
  for (int i = 0; i < count; ++i) {
    float since = 0, took = 0;
    CHECK_CUDA(cudaEventElapsedTime(&since, events[0], events[i]));
    CHECK_CUDA(cudaEventElapsedTime(&took, events[i], events[i + 1]));
    for (size_t b = 0; b < kEdges.size(); ++b) {
      if (since < kEdges[b]) {
        buckets[b].push_back(took);
        break;
      }
    }
  }
  for (cudaEvent_t event : events) CHECK_CUDA(cudaEventDestroy(event));
  std::vector<double> out;
  for (const auto& b : buckets) out.push_back(Median(b));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Setup s;
  overlap::bench::ShapeFromArgs(argc, argv, s);
  const int rounds = argc >= 5 ? std::max(1, std::atoi(argv[4])) : 3;
  const double rest_ms = argc >= 6 ? std::atof(argv[5]) : 3000;
  s.Start();
  // A first estimate of one GEMM's time, to size the run.
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  CHECK_CUDA(cudaEventRecord(a, s.stream));
  for (int i = 0; i < 10; ++i) s.Run();
  CHECK_CUDA(cudaEventRecord(b, s.stream));
  CHECK_CUDA(cudaStreamSynchronize(s.stream));
  float ten = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ten, a, b));

  std::printf(
      "GEMM %lldx%lldx%lld bf16, %.0f ms rest, then back to back for %.0f ms; median ms "
      "per bucket of time since the rest ended\n",
      static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k),
      rest_ms, kRunMs);
  std::printf("%-8s", "round");
  double lo = 0;
  for (double e : kEdges) {
    std::printf(" %5.0f-%-5.0f", lo, e);
    lo = e;
  }
  std::printf("\n");
  for (int r = 0; r < rounds; ++r) {
    const std::vector<double> ms = Round(s, rest_ms, ten / 10);
    std::printf("%-8d", r + 1);
    for (double x : ms) std::printf(" %11.3f", x);
    std::printf("\n");
  }
  return 0;
}
