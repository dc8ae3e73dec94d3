// piece_edges: what the boundary between two GEMM pieces costs in a replayed
// graph, and whether a programmatic edge takes it back. A ring schedule runs a
// GEMM as P pieces of rows on one stream; each boundary pays the last wave's
// tail of one kernel and the ramp-up of the next. A programmatic edge
// (cudaGraphDependencyTypeProgrammatic) lets the next piece start when every
// block of the previous one has started (port LaunchCompletion) or ended (port
// Programmatic), not when the whole kernel has finished and flushed. The pieces
// write disjoint rows and read only the inputs, so nothing orders them but time.
// Usage: piece_edges [M N K]   (row-major C[M,N] = A[M,K] x B[K,N], bf16)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench/probes/gemm_util.h"
#include "bench/probes/probe_util.h"
#include "server/cuda/gemm_chain.h"
#include "server/cuda/gemm_lt.h"
#include "server/cuda/kernels.h"

namespace {

using overlap::bench::AllocateFilled;
using overlap::bench::Median;
using overlap::bench::Problem;
using overlap::bench::RunOrDie;
using overlap::cuda::GemmChain;
using overlap::cuda::GemmFootprint;
using overlap::cuda::GemmLt;
using overlap::cuda::GemmProblem;

constexpr size_t kWorkspace = 32 << 20;

enum class Edge { kFull, kLaunchCompletion, kProgrammatic, kChain };
const char* EdgeName(Edge e) {
  switch (e) {
    case Edge::kFull:
      return "full";
    case Edge::kLaunchCompletion:
      return "launch-completion";
    case Edge::kProgrammatic:
      return "programmatic";
    case Edge::kChain:
      return "chain (engine)";
  }
  return "?";
}

float Bf16ToFloat(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

struct Setup : overlap::bench::Bf16Gemm {
  Setup() { m = 8192, n = 4096, k = 2048; }  // gemm_rs 8192x4096x4096 at tp = 2, per rank
  std::vector<void*> workspaces;             // one per piece: pieces may overlap in time
  cudaStream_t stream = nullptr;
  GemmLt* gemm = nullptr;
};

void RunPiece(const Setup& s, int pieces, int p, int workspace) {
  const int64_t rows = s.m / pieces;
  RunOrDie(*s.gemm, Problem(s, p * rows, rows), s.stream, s.workspaces[workspace], kWorkspace);
}

cudaGraphExec_t Capture(const Setup& s, int pieces, Edge edge) {
  CHECK_CUDA(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeRelaxed));
  cudaGraphNode_t previous = nullptr;
  GemmChain chain;
  for (int p = 0; p < pieces; ++p) {
    if (edge == Edge::kChain) {
      const int64_t rows = s.m / pieces;
      const GemmProblem g = Problem(s, p * rows, rows);
      const char* a = static_cast<const char*>(g.a);
      const char* b = static_cast<const char*>(g.b);
      const char* c = static_cast<const char*>(g.c);
      GemmFootprint f;
      f.a = {a, a + rows * s.k * 2};
      f.b = {b, b + s.k * s.n * 2};
      f.c = {c, c + rows * s.n * 2};
      absl::StatusOr<int> workspace = chain.Before(s.stream, f);
      if (!workspace.ok()) {
        std::fprintf(stderr, "chain: %s\n", std::string(workspace.status().message()).c_str());
        std::exit(1);
      }
      RunPiece(s, pieces, p, *workspace);
      if (absl::Status st = chain.After(s.stream); !st.ok()) {
        std::fprintf(stderr, "chain: %s\n", std::string(st.message()).c_str());
        std::exit(1);
      }
      continue;
    }
    if (previous != nullptr && edge != Edge::kFull) {
      cudaGraphEdgeData data{};
      data.from_port = edge == Edge::kLaunchCompletion ? cudaGraphKernelNodePortLaunchCompletion
                                                       : cudaGraphKernelNodePortProgrammatic;
      data.type = cudaGraphDependencyTypeProgrammatic;
      CHECK_CUDA(cudaStreamUpdateCaptureDependencies(s.stream, &previous, &data, 1,
                                                     cudaStreamSetCaptureDependencies));
    }
    RunPiece(s, pieces, p, p);
    cudaStreamCaptureStatus status;
    const cudaGraphNode_t* deps = nullptr;
    size_t count = 0;
    CHECK_CUDA(
        cudaStreamGetCaptureInfo(s.stream, &status, nullptr, nullptr, &deps, nullptr, &count));
    if (count != 1) {
      std::fprintf(stderr, "piece %d left %zu capture dependencies\n", p, count);
      std::exit(1);
    }
    previous = deps[0];
    cudaGraphNodeType type;
    CHECK_CUDA(cudaGraphNodeGetType(previous, &type));
    if (type != cudaGraphNodeTypeKernel) {
      std::fprintf(stderr, "piece %d ends in a node of type %d, not a kernel\n", p, type);
      std::exit(1);
    }
  }
  cudaGraph_t graph;
  CHECK_CUDA(cudaStreamEndCapture(s.stream, &graph));
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  CHECK_CUDA(cudaGraphDestroy(graph));
  return exec;
}

// Median microseconds of one replay, timed back to back in batches.
double TimeReplays(const Setup& s, cudaGraphExec_t exec) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < 20; ++i) CHECK_CUDA(cudaGraphLaunch(exec, s.stream));  // warm, hot
  std::vector<double> us;
  for (int batch = 0; batch < 15; ++batch) {
    CHECK_CUDA(cudaEventRecord(start, s.stream));
    for (int i = 0; i < 20; ++i) CHECK_CUDA(cudaGraphLaunch(exec, s.stream));
    CHECK_CUDA(cudaEventRecord(stop, s.stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(ms * 1000.0 / 20);
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  return Median(us);
}

std::vector<uint16_t> Download(const Setup& s) {
  std::vector<uint16_t> out(s.m * s.n);
  CHECK_CUDA(cudaMemcpy(out.data(), s.c, out.size() * 2, cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Setup s;
  overlap::bench::ShapeFromArgs(argc, argv, s);
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  AllocateFilled(s, s.stream, 0.05f);
  for (int p = 0; p < 16; ++p) {
    void* w;
    CHECK_CUDA(cudaMalloc(&w, kWorkspace));
    s.workspaces.push_back(w);
  }
  auto gemm = GemmLt::Create(0);
  if (!gemm.ok()) return 1;
  s.gemm = gemm->get();

  const int rounds = argc == 5 ? std::max(1, std::atoi(argv[4])) : 1;
  RunPiece(s, 1, 0, 0);
  CHECK_CUDA(cudaStreamSynchronize(s.stream));
  const std::vector<uint16_t> reference = Download(s);

  std::printf("GEMM %lldx%lldx%lld bf16, one replay of P pieces (us), %d interleaved rounds\n",
              static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k),
              rounds);
  struct Variant {
    int pieces;
    Edge edge;
    std::vector<double> us;
    double diff = 0;
  };
  std::vector<Variant> variants;
  for (int pieces : {1, 2, 4, 8}) {
    for (Edge edge : {Edge::kFull, Edge::kLaunchCompletion, Edge::kProgrammatic, Edge::kChain}) {
      if (pieces == 1 && edge != Edge::kFull) continue;
      variants.push_back({pieces, edge, {}, 0});
    }
  }
  for (int round = 0; round < rounds; ++round) {
    for (Variant& v : variants) {
      for (int p = 0; p < v.pieces; ++p) {
        for (int w = 0; w < 2; ++w) RunPiece(s, v.pieces, p, w);  // tune outside the capture
      }
      CHECK_CUDA(cudaStreamSynchronize(s.stream));
      CHECK_CUDA(cudaMemset(s.c, 0xff, s.m * s.n * 2));  // NaN: every row must be rewritten
      cudaGraphExec_t exec = Capture(s, v.pieces, v.edge);
      v.us.push_back(TimeReplays(s, exec));
      CHECK_CUDA(cudaGraphExecDestroy(exec));
      const std::vector<uint16_t> got = Download(s);
      for (size_t i = 0; i < got.size(); ++i) {
        const double d = std::fabs(Bf16ToFloat(got[i]) - Bf16ToFloat(reference[i]));
        v.diff = std::isnan(d) ? INFINITY : std::max(v.diff, d);
      }
    }
  }
  std::printf("%6s %-18s %10s %12s %10s  %s\n", "pieces", "edge", "median us", "vs 1 piece",
              "max diff", "each round");
  const double whole = Median(variants[0].us);
  for (const Variant& v : variants) {
    const double us = Median(v.us);
    std::printf("%6d %-18s %10.1f %11.1f%% %10.2g ", v.pieces, EdgeName(v.edge), us,
                100.0 * (us / whole - 1), v.diff);
    for (double u : v.us) std::printf(" %.1f", u);
    std::printf("\n");
  }
  return 0;
}
