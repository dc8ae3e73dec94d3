// enqueue_cost: the host time of each call a session's command makes to put one
// GEMM on a stream (issue 56: call to enqueue), layer by layer, so that the
// engine's own cost can be told from cuBLASLt's and the CUDA runtime's:
//   cudaEventRecord, the engine's RecordEvent, cublasLtMatmul with the heuristic's
//   first algorithm, our GemmLt::Run on a tuned shape, the engine's Gemm, and
//   the launch of that Gemm captured as a graph.
// Each call is timed alone with the steady clock, N times after a warm-up, while
// the GPU is still busy with the earlier calls (so no call waits for it).
// Usage: enqueue_cost [M N K] [N]   (bf16; default 2048 4096 4096, 300 calls)
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "bench/probes/gemm_util.h"
#include "bench/probes/probe_util.h"
#include "client/session/cuda_shared_buffer.h"
#include "common/config.h"
#include "common/stats.h"
#include "server/cuda/cuda_engine.h"

namespace {

using Clock = std::chrono::steady_clock;

// Times `call` `n` times after 10 untimed ones; prints p50/p90/p99 in microseconds.
void Time(const char* what, int n, const std::function<bool()>& call,
          const std::function<void()>& drain) {
  for (int i = 0; i < 10; ++i) {
    if (!call()) {
      std::fprintf(stderr, "%s failed\n", what);
      std::exit(1);
    }
  }
  drain();
  std::vector<double> us;
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    const bool ok = call();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (!ok) std::exit(1);
  }
  drain();
  std::printf("%-34s %8.2f %8.2f %8.2f\n", what, overlap::Percentile(us, 50),
              overlap::Percentile(us, 90), overlap::Percentile(us, 99));
}

}  // namespace

int main(int argc, char** argv) {
  using overlap::engine::StreamRole;
  const int64_t m = argc > 3 ? std::atoll(argv[1]) : 2048;
  const int64_t n = argc > 3 ? std::atoll(argv[2]) : 4096;
  const int64_t k = argc > 3 ? std::atoll(argv[3]) : 4096;
  const int calls = argc > 4 ? std::atoi(argv[4]) : 300;

  overlap::DaemonConfig config;
  config.pool_bytes_per_device = int64_t{1} << 30;
  auto created = overlap::cuda::CreateCudaEngineTyped(config);
  if (!created.ok()) {
    std::fprintf(stderr, "engine: %s\n", created.status().ToString().c_str());
    return 1;
  }
  overlap::cuda::CudaEngine& eng = **created;
  const overlap::engine::StreamId stream = eng.GetStream(0, StreamRole::kCompute, 0);
  auto engine_drain = [&] { (void)eng.Synchronize({0}); };

  // Raw CUDA and cuBLASLt on a stream of our own, over their own buffers.
  CHECK_CUDA(cudaSetDevice(0));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreate(&s));
  auto raw_drain = [&] { CHECK_CUDA(cudaStreamSynchronize(s)); };
  overlap::bench::Bf16Gemm g;
  g.m = m, g.n = n, g.k = k;
  overlap::bench::AllocateFilled(g, s, 0.01f);
  const size_t ws_bytes = size_t{64} << 20;
  void* ws;
  CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
  cudaEvent_t ev;
  CHECK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));

  std::printf("host time per call, us (%d calls; GEMM bf16 %ldx%ldx%ld)\n", calls, long(m), long(n),
              long(k));
  std::printf("%-34s %8s %8s %8s\n", "call", "p50", "p90", "p99");
  Time(
      "cudaEventRecord", calls, [&] { return cudaEventRecord(ev, s) == cudaSuccess; }, raw_drain);

  // cublasLtMatmul with the heuristic's first algorithm, descriptors made once.
  cublasLtHandle_t lt;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) return 1;
  cublasLtMatmulDesc_t op;
  cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, n, k, n);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, m, k);
  cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, m, n);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  const uint64_t max_ws = ws_bytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws,
                                       sizeof(max_ws));
  cublasLtMatmulHeuristicResult_t result = {};
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &result, &found) !=
          CUBLAS_STATUS_SUCCESS ||
      found == 0) {
    std::fprintf(stderr, "no heuristic algorithm\n");
    return 1;
  }
  const float alpha = 1, beta = 0;
  Time(
      "cublasLtMatmul (heuristic algo)", calls,
      [&] {
        return cublasLtMatmul(lt, op, &alpha, g.b, la, g.a, lb, &beta, g.c, lc, g.c, lc,
                              &result.algo, ws, ws_bytes, s) == CUBLAS_STATUS_SUCCESS;
      },
      raw_drain);

  auto ours = overlap::cuda::GemmLt::Create(0);
  if (!ours.ok()) return 1;
  const overlap::cuda::GemmProblem p = overlap::bench::Problem(g);
  overlap::bench::RunOrDie(**ours, p, s, ws, ws_bytes);  // tunes the shape
  Time(
      "GemmLt::Run (tuned shape)", calls,
      [&] { return (*ours)->Run(p, s, ws, ws_bytes, 0, [] { return absl::OkStatus(); }).ok(); },
      raw_drain);

  // The engine's own calls, as a session's command makes them.
  auto event = eng.CreateEvent(0);
  if (!event.ok()) return 1;
  Time(
      "engine RecordEvent", calls, [&] { return eng.RecordEvent(*event, stream).ok(); },
      engine_drain);
  auto alloc = [&](size_t bytes) {
    auto buffer = eng.Allocate(0, bytes);
    if (!buffer.ok()) std::exit(1);
    return *buffer;
  };
  overlap::engine::GemmArgs args;
  args.m = m, args.n = n, args.k = k;
  args.a = {alloc(m * k * 2), 0, k};
  args.b = {alloc(k * n * 2), 0, n};
  args.c = {alloc(m * n * 2), 0, n};
  (void)eng.FillRandom(stream, {args.a.buffer, 0, size_t(m * k * 2)}, overlap::DType::kBF16, 1,
                       1.0f);
  (void)eng.FillRandom(stream, {args.b.buffer, 0, size_t(k * n * 2)}, overlap::DType::kBF16, 2,
                       0.01f);
  Time(
      "engine Gemm", calls, [&] { return eng.Gemm(stream, args).ok(); }, engine_drain);
  Time(
      "engine RecordEvent + Gemm", calls,
      [&] { return eng.RecordEvent(*event, stream).ok() && eng.Gemm(stream, args).ok(); },
      engine_drain);
  // The same GEMM captured once and replayed, as a session op is (session_graphs).
  overlap::engine::GraphCapture* graphs = eng.Graphs();
  if (graphs == nullptr || !graphs->BeginCapture(stream).ok()) return 1;
  const bool recorded = eng.Gemm(stream, args).ok();
  auto graph = graphs->EndCapture(stream);
  if (!recorded || !graph.ok()) return 1;
  Time(
      "engine LaunchGraph (one GEMM)", calls,
      [&] { return graphs->LaunchGraph(*graph, stream).ok(); }, engine_drain);

  // A session command's signal words: memory a client exported (cuMemCreate,
  // a POSIX fd), imported by the engine; the wait is already satisfied.
  auto exported = overlap::session::CudaSharedBuffer::Create(0, 2 << 20);
  if (!exported.ok()) {
    std::fprintf(stderr, "export: %s\n", exported.status().ToString().c_str());
    return 1;
  }
  overlap::engine::SharedMemory* shared = eng.Shared();
  auto words = shared->ImportBuffer(0, exported->fd(), 0, 2 << 20);
  if (!words.ok()) {
    std::fprintf(stderr, "import: %s\n", words.status().ToString().c_str());
    return 1;
  }
  const overlap::engine::BufferRef word{*words, 0, sizeof(uint64_t)};
  (void)eng.FillConstant(stream, {*words, 0, 64}, overlap::DType::kF32, 0.0f);
  const absl::Time far = absl::Now() + absl::Hours(1);
  Time(
      "engine WaitValue (word >= 0)", calls,
      [&] { return shared->WaitValue(stream, word, 0, far).ok(); }, engine_drain);
  Time(
      "engine WriteValue", calls, [&] { return shared->WriteValue(stream, word, 0).ok(); },
      engine_drain);
  eng.Free(*words);
  return 0;
}
