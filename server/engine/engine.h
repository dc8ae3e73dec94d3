// The engine: the one interface the overlapped schedules are written against.
//
// It models a single process that owns several devices, the way one CUDA process
// owns several GPUs. Every call only *enqueues* work on a stream and returns;
// streams run in order, and the only cross-stream ordering is through events:
//
//   RecordEvent(e, s)  marks the point in s's queue reached so far;
//   WaitEvent(t, e)    makes later work on t wait for the latest record of e
//                      made before this call (a wait on a never-recorded event
//                      does nothing). Streams of different devices may wait on
//                      each other's events.
//
// Collectives and point-to-point groups are issued once for all ranks (like an
// ncclGroupStart/End from one process) and run on each rank's given stream.
// Work on one communicator channel never runs concurrently: a schedule that wants
// two collectives in flight at once uses two channels.
//
// Thread safety: calls for disjoint device sets may come from different threads
// at once; calls touching the same devices must come from one thread at a time.
// Errors: INVALID_ARGUMENT for bad handles or ranges, RESOURCE_EXHAUSTED when a
// device is out of memory, FAILED_PRECONDITION for a failed check (the host
// backend's hazard checker), ABORTED when a communicator was aborted, UNAVAILABLE
// when a device is lost; the backend's own message is kept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "server/engine/cross_process.h"
#include "server/engine/device_monitor.h"
#include "server/engine/engine_types.h"
#include "server/engine/graph_capture.h"
#include "server/engine/host_work.h"
#include "server/engine/launch_gates.h"
#include "server/engine/shared_memory.h"

namespace overlap::engine {

// The engine is the work every backend runs (streams, events, memory, GEMMs,
// collectives, copies); what only some have is a part it hands out, or null
// where it has none, so that a caller asks before it uses one and nothing
// answers UNIMPLEMENTED:
//   Monitor()      the live state of devices the engine owns (device_monitor.h);
//   Graphs()       steady-state replay (graph_capture.h);
//   Gates()        launch gates (launch_gates.h);
//   HostWork()     host work in stream order over host-addressable buffers (host_work.h);
//   CrossProcess() library collectives between processes (cross_process.h);
//   Shared()       another process's memory and signals (shared_memory.h).
// Every method is pure, so that a decorator that forgets one fails to
// compile. Backends derive from EngineDefaults, which answers the knobs and
// parts for a backend without them; decorators derive from ForwardingEngine
// (server/engine/forwarding_engine.h); engine_overrides.h lists the work
// calls once for the classes that implement all of them.
class Engine {
 public:
  virtual ~Engine() = default;

  // What the work runs on: the runner reports it, admission sizes jobs by it.
  virtual std::string Name() const = 0;  // "host" | "cuda"
  virtual int DeviceCount() const = 0;
  virtual DeviceInfo GetDeviceInfo(int device) const = 0;
  virtual BackendVersions Versions() const = 0;

  // Knobs and capabilities the schedules read.
  // SMs that library collectives marked beside_gemm may use, and that GEMMs
  // marked beside_collective leave free; 0 = no budget (the library's own
  // choice, and GEMMs take every SM). Config nccl_overlap_ctas.
  virtual int CollectiveSmBudget() const = 0;
  // How long the job runner heats the GPUs with a GEMM before a measured phase
  // (config preheat_ms); 0 where rest does not speed anything up.
  virtual double PreheatMs() const = 0;
  // Ranks each GPU hosts (config ranks_per_gpu): above 1, devices are ranks
  // that share GPUs, good for checking schedules but not for timing them.
  virtual int RanksPerGpu() const = 0;
  // Whether library collectives take CollectiveArgs::algorithm (NCCL does; the
  // host backend's collectives have one way to move their bytes).
  virtual bool LibraryAlgorithms() const = 0;
  // Whether Gemm applies GemmArgs::epilogue (gelu) in the GEMM itself:
  // cuBLASLt's GELU_AUX epilogue on CUDA, the host's kernels on the host
  // backend. Where not, a caller runs Elementwise after the GEMM.
  virtual bool GemmEpilogues() const = 0;
  // False for a device that another process holds: a rank of a job that spans
  // daemons (server/cluster/spanning_engine.h). Nothing enqueued there runs
  // here, and its buffers and events have no contents or times to read.
  virtual bool IsLocalDevice(int device) const = 0;
  // How the critical lane (kComm streams) and the deferred lane (kDeferred
  // streams, channel kDeferredLaneChannel) are set up: stream priorities and
  // their communicators' limits, one line for `node` and the report.
  virtual std::string DescribeLanes() const = 0;

  // The parts only some engines have; null where this one has none. Each
  // lives as long as the engine.
  virtual const DeviceMonitor* Monitor() const = 0;
  virtual GraphCapture* Graphs() const = 0;
  virtual LaunchGates* Gates() const = 0;
  virtual HostWorkQueue* HostWork() const = 0;
  virtual CrossProcessCollectives* CrossProcess() const = 0;
  virtual SharedMemory* Shared() const = 0;

  // Streams exist for the engine's lifetime: `index` selects among several
  // streams of one role (0 is always valid; up to StreamsPerRole()).
  virtual StreamId GetStream(int device, StreamRole role, int index = 0) = 0;
  virtual int StreamsPerRole() const = 0;

  // Memory of one device. Contents of a new buffer are undefined.
  virtual absl::StatusOr<BufferId> Allocate(int device, size_t bytes) = 0;
  virtual void Free(BufferId buffer) = 0;

  virtual absl::StatusOr<EventId> CreateEvent(int device) = 0;
  virtual void DestroyEvent(EventId event) = 0;
  virtual absl::Status RecordEvent(EventId event, StreamId stream) = 0;
  virtual absl::Status WaitEvent(StreamId stream, EventId event) = 0;
  // Milliseconds between two completed records of events on one device.
  virtual absl::StatusOr<double> ElapsedMs(EventId start, EventId end) = 0;
  // Whether the latest record of `event` has completed (true when it was
  // never recorded, as cudaEventQuery answers). Never blocks: the run-time
  // dispatcher polls it (server/runner/deferred_dispatcher.h).
  virtual absl::StatusOr<bool> EventDone(EventId event) = 0;

  // Fill with SeededUniform(seed, i) * scale, or with a constant (poisoning
  // uses NaN). `count` elements of `dtype` from the start of `dst`.
  virtual absl::Status FillRandom(StreamId stream, BufferRef dst, DType dtype, uint64_t seed,
                                  float scale) = 0;
  virtual absl::Status FillConstant(StreamId stream, BufferRef dst, DType dtype, float value) = 0;

  virtual absl::Status Gemm(StreamId stream, const GemmArgs& args) = 0;
  // dst[i] += src[i] for count elements (fp32 math).
  virtual absl::Status Accumulate(StreamId stream, BufferRef dst, BufferRef src, DType dtype) = 0;
  // An activation (and cast) between two GEMMs of a chain (ElementwiseArgs).
  virtual absl::Status Elementwise(StreamId stream, const ElementwiseArgs& args) = 0;

  virtual absl::Status AllGather(const CollectiveArgs& args) = 0;
  virtual absl::Status ReduceScatter(const CollectiveArgs& args) = 0;
  virtual absl::Status AllReduce(const CollectiveArgs& args) = 0;
  // Library point-to-point (NCCL send/recv): one group, every transfer at once.
  // `group` lists the devices in rank order (the communicator the group uses);
  // every transfer's devices must be in it. `beside_gemm` as in CollectiveArgs.
  virtual absl::Status SendRecv(int channel, const std::vector<int>& group,
                                const std::vector<Transfer>& transfers, bool beside_gemm) = 0;
  // Copy-engine peer copy, issued on `stream` (of either device).
  virtual absl::Status PeerCopy(StreamId stream, BufferRef dst, int dst_device, BufferRef src,
                                int src_device) = 0;
  // A device-side barrier across the given streams (one per rank, each device
  // once). `channel` is for backends whose barrier is a collective; the CUDA
  // backend's is made of cross-device event waits and needs no communicator.
  virtual absl::Status Barrier(int channel, const std::vector<int>& devices,
                               const std::vector<StreamId>& streams) = 0;

  // Host <-> device, synchronous with respect to all prior work on the device.
  virtual absl::Status CopyToHost(void* dst, BufferRef src, int device) = 0;
  virtual absl::Status CopyFromHost(BufferRef dst, int device, const void* src) = 0;
  // The index of the first element of `src` (of `dtype`) that is not finite
  // (NaN or infinite), -1 when every one is; synchronous like CopyToHost. It
  // proves an output fully written after poisoning without copying it back:
  // FirstNonFiniteOnHost copies it and scans on the host; the CUDA backend
  // scans on the GPU and returns 8 bytes.
  virtual absl::StatusOr<int64_t> FirstNonFinite(BufferRef src, DType dtype, int device) = 0;

  // Blocks until every stream of the given devices is idle; returns the first
  // asynchronous error seen there (the hazard checker's, a library's).
  virtual absl::Status Synchronize(const std::vector<int>& devices) = 0;
};

// FirstNonFinite for an engine that scans on the host: copies `src` back.
absl::StatusOr<int64_t> FirstNonFiniteOnHost(Engine& engine, BufferRef src, DType dtype,
                                             int device);

// A backend without knobs or optional parts: no SM budget, no preheat, one
// rank a GPU, no library algorithms, every device local, and no parts.
class EngineDefaults : public Engine {
 public:
  int CollectiveSmBudget() const override { return 0; }
  double PreheatMs() const override { return 0; }
  int RanksPerGpu() const override { return 1; }
  bool LibraryAlgorithms() const override { return false; }
  bool GemmEpilogues() const override { return false; }
  bool IsLocalDevice(int device) const override { return true; }
  std::string DescribeLanes() const override {
    return "critical and deferred lanes: streams of equal priority, no communicator limits";
  }
  const DeviceMonitor* Monitor() const override { return nullptr; }
  GraphCapture* Graphs() const override { return nullptr; }
  LaunchGates* Gates() const override { return nullptr; }
  HostWorkQueue* HostWork() const override { return nullptr; }
  CrossProcessCollectives* CrossProcess() const override { return nullptr; }
  SharedMemory* Shared() const override { return nullptr; }
};

}  // namespace overlap::engine
