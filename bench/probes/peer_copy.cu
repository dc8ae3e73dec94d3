// peer_copy: how fast do copy-engine peer copies move data between two GPUs,
// issued the ways a schedule could issue them?
//
// Our p2p collectives reach ~311 GB/s per direction at 128 MiB (commbench,
// tp = 2) where DEVICE.md measured 384-392 GB/s for raw peer copies. This
// separates what could explain the gap. For each size (bytes per direction):
//   dirs    both (0->1 and 1->0 at once, as every exchange runs) or one (0->1)
//   issuer  pull (the destination's stream copies, as our collectives do) or
//           push (the source's stream)
//   split   the copy cut into 1, 2 or 4 parts, each on its own stream (more
//           copy engines at work, if the driver spreads streams over them)
//   graph   enqueued directly, or captured once into a multi-device graph and
//           replayed (our steady-state iterations replay graphs)
// A spin kernel holds device 0 while the host enqueues, device 1 waits for it,
// so the figures are GPU time from the start on device 0 to the last copy's
// end joined back there (one cross-device hop, ~5 us, is included alike).
// Usage: peer_copy [MIB ...]   (default 8 32 128). Needs two GPUs with peer
// access for its answer; on one GPU both "devices" are device 0 and the copies
// are local (a check of the tool, not of any link).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/probes/probe_util.h"

namespace {

constexpr int kStreams = 4;
constexpr int kRepeats = 20;

__global__ void Spin(long long cycles) {
  const long long t = clock64();
  while (clock64() - t < cycles) {
  }
}

struct Device {
  cudaStream_t main;
  cudaStream_t side[kStreams];
  cudaEvent_t forked, done[kStreams], joined;
  char* src;
  char* dst;
};
Device dev[2];
int gpu[2] = {0, 1};  // the CUDA device behind each end

struct Variant {
  bool both;
  bool push;
  int split;
  bool graph;
  std::string Name() const {
    return std::string(both ? "both" : "one ") + (push ? " push" : " pull") + " split " +
           std::to_string(split) + (graph ? " graph " : " direct");
  }
};

// One iteration from device 0's main stream back to it: device 1 joins in,
// every copy runs on its issuer's side streams, everything joins back.
void EnqueueCopies(const Variant& v, size_t bytes) {
  CHECK_CUDA(cudaSetDevice(gpu[0]));
  CHECK_CUDA(cudaEventRecord(dev[0].forked, dev[0].main));
  CHECK_CUDA(cudaSetDevice(gpu[1]));
  CHECK_CUDA(cudaStreamWaitEvent(dev[1].main, dev[0].forked, 0));
  CHECK_CUDA(cudaEventRecord(dev[1].forked, dev[1].main));
  const int directions = v.both ? 2 : 1;
  const size_t part = bytes / v.split;
  bool issues[2] = {false, false};  // which devices' side streams copy
  for (int from = 0; from < directions; ++from) {
    const int to = 1 - from;
    const int issuer = v.push ? from : to;
    issues[issuer] = true;
    CHECK_CUDA(cudaSetDevice(gpu[issuer]));
    for (int s = 0; s < v.split; ++s) {
      cudaStream_t stream = dev[issuer].side[s];
      CHECK_CUDA(cudaStreamWaitEvent(stream, dev[issuer].forked, 0));
      CHECK_CUDA(cudaMemcpyAsync(dev[to].dst + s * part, dev[from].src + s * part, part,
                                 cudaMemcpyDefault, stream));
    }
  }
  // Join: every side stream used back into its device's main stream, then
  // device 1 into device 0. (A graph capture refuses waits on streams that
  // took no part.)
  for (int d = 1; d >= 0; --d) {
    CHECK_CUDA(cudaSetDevice(gpu[d]));
    for (int s = 0; s < (issues[d] ? v.split : 0); ++s) {
      CHECK_CUDA(cudaEventRecord(dev[d].done[s], dev[d].side[s]));
      CHECK_CUDA(cudaStreamWaitEvent(dev[d].main, dev[d].done[s], 0));
    }
    if (d == 1) CHECK_CUDA(cudaEventRecord(dev[1].joined, dev[1].main));
  }
  CHECK_CUDA(cudaSetDevice(gpu[0]));
  CHECK_CUDA(cudaStreamWaitEvent(dev[0].main, dev[1].joined, 0));
}

// GB/s per direction, median of kRepeats iterations.
double Measure(const Variant& v, size_t bytes) {
  cudaGraphExec_t exec = nullptr;
  if (v.graph) {
    CHECK_CUDA(cudaSetDevice(gpu[0]));
    cudaGraph_t graph;
    CHECK_CUDA(cudaStreamBeginCapture(dev[0].main, cudaStreamCaptureModeRelaxed));
    EnqueueCopies(v, bytes);
    CHECK_CUDA(cudaSetDevice(gpu[0]));
    CHECK_CUDA(cudaStreamEndCapture(dev[0].main, &graph));
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    CHECK_CUDA(cudaGraphDestroy(graph));
  }
  cudaEvent_t a, b;
  CHECK_CUDA(cudaSetDevice(gpu[0]));
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  std::vector<double> ms_list;
  for (int r = -3; r < kRepeats; ++r) {
    CHECK_CUDA(cudaSetDevice(gpu[0]));
    Spin<<<1, 1, 0, dev[0].main>>>(4'000'000);  // ~2 ms: the host enqueues meanwhile
    CHECK_CUDA(cudaEventRecord(a, dev[0].main));
    if (exec != nullptr) {
      CHECK_CUDA(cudaGraphLaunch(exec, dev[0].main));
    } else {
      EnqueueCopies(v, bytes);
    }
    CHECK_CUDA(cudaSetDevice(gpu[0]));
    CHECK_CUDA(cudaEventRecord(b, dev[0].main));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    if (r >= 0) ms_list.push_back(ms);
  }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  if (exec != nullptr) CHECK_CUDA(cudaGraphExecDestroy(exec));
  return bytes / (overlap::bench::Median(ms_list) * 1e-3) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> mib;
  for (int i = 1; i < argc; ++i) mib.push_back(std::strtoull(argv[i], nullptr, 10));
  if (mib.empty()) mib = {8, 32, 128};
  int count = 0;
  CHECK_CUDA(cudaGetDeviceCount(&count));
  if (count < 2) {
    std::printf("one GPU visible: both ends are device 0, the copies are local, not over a link\n");
    gpu[1] = 0;
  }
  size_t max_bytes = 0;
  for (size_t m : mib) max_bytes = std::max(max_bytes, m << 20);
  for (int d = 0; d < 2; ++d) {
    CHECK_CUDA(cudaSetDevice(gpu[d]));
    if (gpu[0] != gpu[1]) CHECK_CUDA(cudaDeviceEnablePeerAccess(gpu[1 - d], 0));
    int lowest = 0, greatest = 0;
    CHECK_CUDA(cudaDeviceGetStreamPriorityRange(&lowest, &greatest));
    CHECK_CUDA(cudaStreamCreateWithPriority(&dev[d].main, cudaStreamNonBlocking, greatest));
    for (int s = 0; s < kStreams; ++s) {
      CHECK_CUDA(cudaStreamCreateWithPriority(&dev[d].side[s], cudaStreamNonBlocking, greatest));
      CHECK_CUDA(cudaEventCreateWithFlags(&dev[d].done[s], cudaEventDisableTiming));
    }
    CHECK_CUDA(cudaEventCreateWithFlags(&dev[d].forked, cudaEventDisableTiming));
    CHECK_CUDA(cudaEventCreateWithFlags(&dev[d].joined, cudaEventDisableTiming));
    CHECK_CUDA(cudaMalloc(&dev[d].src, max_bytes));
    CHECK_CUDA(cudaMalloc(&dev[d].dst, max_bytes));
    CHECK_CUDA(cudaMemset(dev[d].src, 0x3c + d, max_bytes));
  }
  std::printf(
      "GB/s per direction (1e9 bytes/s), median of %d; rows: variant, columns: MiB per direction\n",
      kRepeats);
  std::printf("%-28s", "variant");
  for (size_t m : mib) std::printf("%9zu", m);
  std::printf("\n");
  for (bool graph : {false, true}) {
    for (bool both : {true, false}) {
      for (bool push : {false, true}) {
        for (int split : {1, 2, 4}) {
          const Variant v{both, push, split, graph};
          std::printf("%-28s", v.Name().c_str());
          for (size_t m : mib) std::printf("%9.1f", Measure(v, m << 20));
          std::printf("\n");
          std::fflush(stdout);
        }
      }
    }
  }
  // Every variant copied 0 -> 1, the two-way ones 1 -> 0 too: each destination
  // must now hold its source's fill byte throughout.
  std::vector<unsigned char> host(max_bytes);
  for (int to = 0; to < 2; ++to) {
    CHECK_CUDA(cudaSetDevice(gpu[to]));
    CHECK_CUDA(cudaMemcpy(host.data(), dev[to].dst, max_bytes, cudaMemcpyDeviceToHost));
    const unsigned char want = 0x3c + (1 - to);
    for (size_t i = 0; i < max_bytes; ++i) {
      if (host[i] != want) {
        std::printf("WRONG: device %d byte %zu is 0x%02x, want 0x%02x\n", to, i, host[i], want);
        return 1;
      }
    }
  }
  std::printf("copies checked: every destination byte came from its source\n");
  return 0;
}
