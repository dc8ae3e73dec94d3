// dep_latency: what one cross-device dependency costs on the GPUs, the way our
// schedules chain them. Two devices pass the turn back and forth: device 0
// runs a tiny kernel, device 1 waits for it and runs a tiny kernel (or a 64 KiB
// peer copy, as a ring piece's transfer would), device 0 waits for that, and so
// on. Each hop is signalled one of two ways:
//   events  cudaEventRecord + cudaStreamWaitEvent across devices (what we use);
//   memops  cuStreamWriteValue32 into the peer's memory + cuStreamWaitValue32
//           on one's own (reached through cudaGetDriverEntryPoint: no libcuda
//           link), the mechanism some comm libraries use instead;
// each enqueued directly and captured into one multi-device graph. A spin
// kernel holds device 0 while the host enqueues, so the figures are the GPU's.
// Usage: dep_latency   (needs two GPUs with peer access)
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/probes/probe_util.h"

namespace {

constexpr int kHops = 100;  // round trips per timed unit
constexpr int kRepeats = 20;
constexpr size_t kCopyBytes = 64 << 10;

__global__ void Tiny(int* p) { p[threadIdx.x] += 1; }
__global__ void Spin(long long cycles) {
  const long long t = clock64();
  while (clock64() - t < cycles) {
  }
}

PFN_cuStreamWaitValue32_v11070 wait_value;
PFN_cuStreamWriteValue32_v11070 write_value;

void CheckCu(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "%s failed: CUresult %d\n", what, static_cast<int>(r));
    std::exit(1);
  }
}

struct Device {
  cudaStream_t stream;
  cudaEvent_t hop[kHops];
  int* scratch;
  unsigned* flags;  // one per hop, written by the other device
  char* buffer;     // the copy's destination (and the other device's source)
};
Device dev[2];

// Microseconds per hop (one op plus one cross-device dependency), median of
// kRepeats timed units.
double TimePerHop(const std::function<void()>& unit) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  std::vector<double> us;
  for (int r = -2; r < kRepeats; ++r) {
    CHECK_CUDA(cudaSetDevice(0));
    Spin<<<1, 1, 0, dev[0].stream>>>(20'000'000);  // ~10 ms
    CHECK_CUDA(cudaEventRecord(a, dev[0].stream));
    unit();
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaEventRecord(b, dev[0].stream));
    for (int d = 0; d < 2; ++d) {
      CHECK_CUDA(cudaSetDevice(d));
      CHECK_CUDA(cudaDeviceSynchronize());
    }
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    if (r >= 0) us.push_back(ms * 1000.0 / (2 * kHops));
  }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  return overlap::bench::Median(us);
}

void Work(int d, bool copy) {
  CHECK_CUDA(cudaSetDevice(d));
  if (copy) {
    CHECK_CUDA(cudaMemcpyAsync(dev[d].buffer, dev[1 - d].buffer, kCopyBytes,
                               cudaMemcpyDeviceToDevice, dev[d].stream));
  } else {
    Tiny<<<1, 32, 0, dev[d].stream>>>(dev[d].scratch);
  }
}

void EventTrips(bool copy) {
  for (int i = 0; i < kHops; ++i) {
    Work(0, false);
    CHECK_CUDA(cudaEventRecord(dev[0].hop[i], dev[0].stream));
    CHECK_CUDA(cudaSetDevice(1));
    CHECK_CUDA(cudaStreamWaitEvent(dev[1].stream, dev[0].hop[i], 0));
    Work(1, copy);
    CHECK_CUDA(cudaEventRecord(dev[1].hop[i], dev[1].stream));
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaStreamWaitEvent(dev[0].stream, dev[1].hop[i], 0));
  }
}

// Device `from` writes `value` into the other device's flag i; the other waits for it.
void Signal(int from, int i, unsigned value) {
  const int to = 1 - from;
  CHECK_CUDA(cudaSetDevice(from));
  CheckCu(write_value(reinterpret_cast<CUstream>(dev[from].stream),
                      reinterpret_cast<CUdeviceptr>(dev[to].flags + i), value, 0),
          "cuStreamWriteValue32");
  CHECK_CUDA(cudaSetDevice(to));
  CheckCu(
      wait_value(reinterpret_cast<CUstream>(dev[to].stream),
                 reinterpret_cast<CUdeviceptr>(dev[to].flags + i), value, CU_STREAM_WAIT_VALUE_EQ),
      "cuStreamWaitValue32");
}

void MemopTrips(bool copy, unsigned value) {
  for (int i = 0; i < kHops; ++i) {
    Work(0, false);
    Signal(0, i, value);
    Work(1, copy);
    Signal(1, i, value);
  }
}

void ClearFlags(bool async) {
  for (int d = 0; d < 2; ++d) {
    CHECK_CUDA(cudaSetDevice(d));
    if (async) {
      CHECK_CUDA(cudaMemsetAsync(dev[d].flags, 0, kHops * sizeof(unsigned), dev[d].stream));
    } else {
      CHECK_CUDA(cudaMemset(dev[d].flags, 0, kHops * sizeof(unsigned)));
      CHECK_CUDA(cudaDeviceSynchronize());
    }
  }
  if (async) {
    // Device 0's first signal lands in device 1's flags: after their clearing.
    static cudaEvent_t cleared = [] {
      cudaEvent_t event;
      CHECK_CUDA(cudaSetDevice(1));
      CHECK_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      return event;
    }();
    CHECK_CUDA(cudaSetDevice(1));
    CHECK_CUDA(cudaEventRecord(cleared, dev[1].stream));
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaStreamWaitEvent(dev[0].stream, cleared, 0));
  }
}

// `body` captured from device 0's stream, device 1 forked in and joined back.
cudaGraphExec_t Capture(const std::function<void()>& body) {
  cudaEvent_t fork, join;
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CHECK_CUDA(cudaStreamBeginCapture(dev[0].stream, cudaStreamCaptureModeRelaxed));
  CHECK_CUDA(cudaEventRecord(fork, dev[0].stream));
  CHECK_CUDA(cudaSetDevice(1));
  CHECK_CUDA(cudaStreamWaitEvent(dev[1].stream, fork, 0));
  body();
  CHECK_CUDA(cudaSetDevice(1));
  CHECK_CUDA(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventRecord(join, dev[1].stream));
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaStreamWaitEvent(dev[0].stream, join, 0));
  cudaGraph_t graph;
  CHECK_CUDA(cudaStreamEndCapture(dev[0].stream, &graph));
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  CHECK_CUDA(cudaGraphDestroy(graph));
  return exec;
}

double Replayed(cudaGraphExec_t exec) {
  const double us = TimePerHop([&] {
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaGraphLaunch(exec, dev[0].stream));
  });
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  return us;
}

void Setup() {
  int count = 0;
  CHECK_CUDA(cudaGetDeviceCount(&count));
  if (count < 2) {
    std::fprintf(stderr, "dep_latency needs two GPUs (found %d)\n", count);
    std::exit(1);
  }
  cudaDriverEntryPointQueryResult found;
  CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32",
                                              reinterpret_cast<void**>(&wait_value), 12000,
                                              cudaEnableDefault, &found));
  CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32",
                                              reinterpret_cast<void**>(&write_value), 12000,
                                              cudaEnableDefault, &found));
  for (int d = 0; d < 2; ++d) {
    CHECK_CUDA(cudaSetDevice(d));
    CHECK_CUDA(cudaDeviceEnablePeerAccess(1 - d, 0));
    int lowest, highest;
    CHECK_CUDA(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
    CHECK_CUDA(cudaStreamCreateWithPriority(&dev[d].stream, cudaStreamNonBlocking, highest));
    for (cudaEvent_t& event : dev[d].hop) {
      CHECK_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    }
    CHECK_CUDA(cudaMalloc(&dev[d].scratch, 32 * sizeof(int)));
    CHECK_CUDA(cudaMemset(dev[d].scratch, 0, 32 * sizeof(int)));
    CHECK_CUDA(cudaMalloc(&dev[d].flags, kHops * sizeof(unsigned)));
    CHECK_CUDA(cudaMalloc(&dev[d].buffer, kCopyBytes));
  }
}

}  // namespace

int main() {
  Setup();
  std::printf("%-18s %10s %8s %8s %14s %14s\n", "hop", "same dev", "events", "memops",
              "graph events", "graph memops");
  std::string json = "{\"unit\": \"us per hop\", \"rows\": [";
  for (const bool copy : {false, true}) {
    // One device, one stream: the op alone, for scale.
    const double same = TimePerHop([&] {
      for (int i = 0; i < 2 * kHops; ++i) Work(0, copy && i % 2 == 1);
    });
    const double events = TimePerHop([&] { EventTrips(copy); });
    ClearFlags(false);
    unsigned value = 0;
    const double memops = TimePerHop([&] { MemopTrips(copy, ++value); });
    const double graph_events = Replayed(Capture([&] { EventTrips(copy); }));
    // A graph's values are fixed: each replay clears the flags first, then signals 1.
    const double graph_memops = Replayed(Capture([&] {
      ClearFlags(true);
      MemopTrips(copy, 1);
    }));
    const char* name = copy ? "kernel <-> copy" : "kernel <-> kernel";
    std::printf("%-18s %10.2f %8.2f %8.2f %14.2f %14.2f\n", name, same, events, memops,
                graph_events, graph_memops);
    char row[256];
    std::snprintf(row, sizeof(row),
                  "%s{\"hop\": \"%s\", \"same_device\": %.2f, \"events\": %.2f, \"memops\": "
                  "%.2f, \"graph_events\": %.2f, \"graph_memops\": %.2f}",
                  copy ? ", " : "", name, same, events, memops, graph_events, graph_memops);
    json += row;
  }
  std::printf("%s]}\n", json.c_str());
  return 0;
}
