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
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/dtype.h"

namespace overlap::engine {

using BufferId = int64_t;
using StreamId = int32_t;
using EventId = int64_t;
using GraphId = int64_t;
constexpr BufferId kNoBuffer = -1;
constexpr EventId kNoEvent = -1;

enum class StreamRole {
  kCompute,  // lowest priority: GEMMs, reductions
  kComm,     // highest priority: collectives, peer copies
};

// A byte range of a buffer.
struct BufferRef {
  BufferId buffer = kNoBuffer;
  size_t offset = 0;  // bytes
  size_t bytes = 0;
};

// A row-major matrix view inside a buffer. `ld` is the row stride in elements.
struct MatrixRef {
  BufferId buffer = kNoBuffer;
  size_t offset = 0;  // elements
  int64_t ld = 0;
};

// C = A x B + beta * C, row-major, `batch` times with the given element strides.
// A is [m, k], B is [k, n], C is [m, n]. Accumulation is in fp32. With fp8
// inputs C is bf16 (GemmOutputDType) and B is stored transposed, [n, k] with
// row stride ld (WeightsStoredTransposed): the only layout Hopper's fp8 tensor
// cores read, and each of A and B may carry a per-tensor scale (below).
struct GemmArgs {
  DType dtype = DType::kBF16;
  int64_t m = 0, n = 0, k = 0;
  MatrixRef a, b, c;
  float beta = 0.0f;  // 0 or 1
  int batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  // The GEMM may run while a library collective (NCCL's kernels) of the same op
  // runs beside it: stream priority does not take SMs back from a GEMM that
  // already holds them, so the backend may leave the collective's SMs free
  // (CollectiveSmBudget).
  bool beside_collective = false;
  // C may be a buffer of another device that this one reaches over peer access
  // (NVLink): the GEMM's epilogue stores (and with beta = 1 loads) it across the
  // link, so a partial lands on its owner with no copy. A and B stay local.
  bool c_on_peer = false;
  // fp8 only: the per-tensor dequantization scales of A and B, one fp32 each in
  // the GEMM device's memory at a 16-byte-aligned address (cuBLASLt refuses
  // others as NOT_SUPPORTED), read when the GEMM runs, as TransformerEngine's
  // scale_inv is, so that a scale computed on the GPU needs no host sync:
  // C = a_scale * b_scale * (A x B) + beta * C. No buffer means 1.
  BufferRef a_scale, b_scale;
};

// What every backend checks of a GEMM's scales before resolving them:
// INVALID_ARGUMENT when one is given for a dtype other than fp8, does not span
// exactly one fp32 or is not 16-byte aligned within its buffer (buffers are).
absl::Status CheckGemmScales(const GemmArgs& args);
inline constexpr size_t kGemmScaleAlignment = 16;

// One rank's part of a collective.
struct RankBuffers {
  int device = 0;
  StreamId stream = 0;
  BufferRef send;
  BufferRef recv;
};

// The algorithm of a library collective: the library's own choice per size,
// or one pinned for the communicator (NCCL_ALGO). Only all-reduces pin one.
enum class LibraryAlgorithm { kLibraryChoice, kRing, kTree };

// Collectives in rank order (ranks[i] is rank i). `count` is in elements:
// AllGather: sent per rank; ReduceScatter: received per rank; AllReduce: total.
// fp8 is only gathered: sums in it are INVALID_ARGUMENT (reduce GEMM outputs,
// which are bf16), and so is Accumulate.
struct CollectiveArgs {
  DType dtype = DType::kBF16;
  size_t count = 0;
  int channel = 0;  // communicator index: two channels may run concurrently
  // Runs beside GEMMs (on a comm stream): the backend may cap the SMs its
  // kernels take (CollectiveSmBudget).
  bool beside_gemm = false;
  // Anything but kLibraryChoice needs LibraryAlgorithms(); a backend without it
  // answers UNIMPLEMENTED.
  LibraryAlgorithm algorithm = LibraryAlgorithm::kLibraryChoice;
  std::vector<RankBuffers> ranks;
};

// One transfer of a point-to-point group: src (on src_device, issued on
// src_stream) to dst (on dst_device, issued on dst_stream).
struct Transfer {
  int src_device = 0;
  StreamId src_stream = 0;
  BufferRef src;
  int dst_device = 0;
  StreamId dst_stream = 0;
  BufferRef dst;
};

struct DeviceInfo {
  int index = 0;
  std::string name;
  int64_t memory_bytes = 0;  // what jobs may allocate: the daemon's pool
  // The device's whole memory, of which the pool is a part; 0 where unknown.
  int64_t total_memory_bytes = 0;
  std::string pci_bus_id;
};

// Live readings of one device (NVML on the CUDA backend); valid is false where
// the backend has none (the host backend, a machine without libnvidia-ml).
struct DeviceTelemetry {
  bool valid = false;
  int sm_clock_mhz = 0;
  int mem_clock_mhz = 0;
  int temperature_c = 0;
  double power_w = 0;
  int utilization_pct = 0;  // percent of the last sample period a kernel ran
  int max_sm_clock_mhz = 0;  // 0 = unknown
  // What holds the clocks back now (NVML's clocks event reasons, ClockLimitNames).
  bool clock_limits_valid = false;
  uint64_t clock_limits = 0;
  // Time the clocks were held below their application clocks by the power
  // limit and by heat, cumulative since the driver loaded (NVML violation
  // counters, as DCGM's power and thermal violation fields): sampled twice,
  // their difference over the time between says how much of it was capped.
  bool capped_time_valid = false;
  double power_capped_s = 0;
  double thermal_capped_s = 0;
  // Health, as DCGM's checks read it: a PCIe link trained below its best, an
  // NVLink down or taking errors, uncorrectable ECC errors and row remaps.
  // Each group is valid only where NVML answers it (no NVLink on a PCIe card,
  // no ECC counts with ECC off). Counters are cumulative since the driver loaded.
  bool pcie_valid = false;
  int pcie_gen = 0, pcie_max_gen = 0;  // the current gen drops at idle to save power
  int pcie_width = 0, pcie_max_width = 0;
  int64_t pcie_replays = 0;
  bool nvlink_valid = false;
  int nvlinks_active = 0;
  int nvlinks_supported = 0;      // links that report a state
  int64_t nvlink_crc_errors = 0;  // flit and data CRC, summed over the links
  int64_t nvlink_replay_errors = 0;
  int64_t nvlink_recovery_errors = 0;
  bool ecc_valid = false;
  int64_t ecc_corrected = 0;  // volatile counts
  int64_t ecc_uncorrected = 0;
  bool row_remap_valid = false;
  bool row_remap_pending = false;  // applied at the next GPU reset
  bool row_remap_failed = false;
  // Xid errors (NVML events) this boot, kept across the daemon's restarts where
  // it has a state directory (xid_log.h); xid_valid where NVML lets it watch them.
  bool xid_valid = false;
  int64_t xid_errors = 0;
  int64_t gpu_xid_errors = 0;  // those that point at the GPU (common/xid.h)
  uint64_t last_xid = 0;
  int64_t last_xid_unix_ms = 0;
};

// The names of the reasons set in NVML's clocks event reasons `mask`, most
// telling first: "power" (software power cap), "thermal" (software thermal
// slowdown), "hw-slowdown", "hw-thermal", "power-brake", "app-clocks",
// "sync-boost", "display", "idle", and "0x..." for bits NVML may add later.
std::vector<std::string> ClockLimitNames(uint64_t mask);

struct BackendVersions {
  std::string cuda_runtime, cuda_driver, nccl, cublas;
};

// Every method is pure, so that a decorator that forgets one fails to
// compile. Backends derive from EngineDefaults, which answers the optional
// parts (telemetry, Xids, knobs, graph replay, launch gates) for a backend
// without them; decorators derive from ForwardingEngine
// (server/engine/forwarding_engine.h).
class Engine {
 public:
  virtual ~Engine() = default;

  virtual std::string Name() const = 0;  // "host" | "cuda"
  virtual int DeviceCount() const = 0;
  virtual DeviceInfo GetDeviceInfo(int device) const = 0;
  virtual BackendVersions Versions() const = 0;
  virtual int64_t MemoryInUse(int device) const = 0;
  virtual DeviceTelemetry Telemetry(int device) const = 0;
  // Sets `device`'s Xid counts back to 0 (after the GPU was reset) and returns
  // how many Xids they held; FAILED_PRECONDITION where the backend counts none.
  // const like Telemetry: the counts are the health readings' bookkeeping, not
  // state any job sees.
  virtual absl::StatusOr<int64_t> ForgetXids(int device) const = 0;
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

  // Fill with SeededUniform(seed, i) * scale, or with a constant (poisoning
  // uses NaN). `count` elements of `dtype` from the start of `dst`.
  virtual absl::Status FillRandom(StreamId stream, BufferRef dst, DType dtype, uint64_t seed,
                                  float scale) = 0;
  virtual absl::Status FillConstant(StreamId stream, BufferRef dst, DType dtype, float value) = 0;

  virtual absl::Status Gemm(StreamId stream, const GemmArgs& args) = 0;
  // dst[i] += src[i] for count elements (fp32 math).
  virtual absl::Status Accumulate(StreamId stream, BufferRef dst, BufferRef src, DType dtype) = 0;

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
  // EngineDefaults copies it and scans on the host; the CUDA backend scans on
  // the GPU and returns 8 bytes.
  virtual absl::StatusOr<int64_t> FirstNonFinite(BufferRef src, DType dtype, int device) = 0;

  // Host work in a stream's order, the role of cudaLaunchHostFunc: once the
  // stream reaches it, `work` runs on the host with the address of each of
  // `buffers` (on the stream's device; each counts as written, for the hazard
  // checker), and an error it returns becomes the stream's asynchronous error
  // (Synchronize reports it). It may block (a collective across processes):
  // the stream waits, the device's other streams go on. Backends whose memory
  // the host cannot address answer UNIMPLEMENTED.
  using HostWork = std::function<absl::Status(const std::vector<uint8_t*>& data)>;
  virtual absl::Status EnqueueHostWork(StreamId stream, const std::vector<BufferRef>& buffers,
                                       HostWork work) = 0;
  // Whether EnqueueHostWork runs here: the host can address the buffers (the
  // host backend), so host libraries (Gloo) can carry its collectives.
  virtual bool HostWorkOnBuffers() const = 0;
  // Collectives between processes (the ranks of a job spanning daemons),
  // where the backend's library makes communicators across them (NCCL). A
  // communicator is named by an id from NewCommunicatorId, made in one process
  // and handed to the others (the job's store carries it); each process then
  // issues every collective on it with its own ranks: args.ranks[i] is rank
  // global_ranks[i] of `nranks`. `count` as in CollectiveArgs, so an
  // all-gather receives count x nranks. Backends without them answer
  // UNIMPLEMENTED (the host backend's cross-process collectives are Gloo's,
  // over EnqueueHostWork).
  enum class CollectiveOp { kAllGather, kReduceScatter, kAllReduce };
  virtual bool CrossProcessCollectives() const = 0;
  virtual absl::StatusOr<std::string> NewCommunicatorId() = 0;
  virtual absl::Status CrossProcessCollective(CollectiveOp op, const std::string& id, int nranks,
                                              const std::vector<int>& global_ranks,
                                              const CollectiveArgs& args) = 0;

  // False for a device that another process holds: a rank of a job that spans
  // daemons (server/cluster/spanning_engine.h). Nothing enqueued there runs
  // here, and its buffers and events have no contents or times to read.
  virtual bool IsLocalDevice(int device) const = 0;

  // Blocks until every stream of the given devices is idle; returns the first
  // asynchronous error seen there (the hazard checker's, a library's).
  virtual absl::Status Synchronize(const std::vector<int>& devices) = 0;

  // Steady-state replay (CUDA graphs). Between BeginCapture and EndCapture,
  // work enqueued on `origin`, and on every stream that joins it by waiting on
  // an event recorded there (of any device), is recorded instead of run; each
  // joined stream must be joined back into `origin` before EndCapture. A call
  // that fails inside the capture spoils it: EndCapture must still be called,
  // and then fails.
  // LaunchGraph runs the recorded work once, after what is queued on `stream`
  // (of origin's device), and later work on `stream` waits for all of it.
  // Backends without graphs return UNIMPLEMENTED and callers enqueue directly;
  // ReplaysGraphs says beforehand whether BeginCapture can succeed (the backend
  // has graphs and they are on).
  virtual bool ReplaysGraphs() const = 0;
  virtual absl::Status BeginCapture(StreamId origin) = 0;
  virtual absl::StatusOr<GraphId> EndCapture(StreamId origin) = 0;
  virtual absl::Status LaunchGraph(GraphId graph, StreamId stream) = 0;
  virtual void DestroyGraph(GraphId graph) = 0;

  // Launch gates. HoldStreams holds each of `streams` (of any devices): what is
  // queued behind the hold runs only once ReleaseGate(ticket) is called, or once
  // `max_hold_ms` has passed (a held stream must never deadlock a host call that
  // waits for the GPU). Timed behind a gate, an iteration measures the GPUs
  // alone, as a training loop whose host runs ahead sees them, and not the
  // host's enqueue latency: a non-blocking NCCL communicator queues its kernels
  // from a background thread some 0.1 ms after the call returns. GateTimeouts
  // counts the holds on `device` that ended by timing out (exact once the
  // device is synchronized). Backends without gates, or with them off
  // (launch_gate: false), say so with HasGates and return UNIMPLEMENTED.
  virtual bool HasGates() const = 0;
  virtual absl::StatusOr<int64_t> HoldStreams(const std::vector<StreamId>& streams,
                                              double max_hold_ms) = 0;
  virtual absl::Status ReleaseGate(int64_t ticket) = 0;
  virtual int64_t GateTimeouts(int device) const = 0;

  // False once a device hit a sticky error (the context is lost): the daemon
  // reports NOT_SERVING and exits so that systemd restarts it.
  virtual bool Healthy() const = 0;
};

// The optional parts of an Engine as a backend without them answers: no
// telemetry or Xids, no knobs, no graph replay (UNIMPLEMENTED), no launch
// gates (UNIMPLEMENTED), and FirstNonFinite by copying to the host.
class EngineDefaults : public Engine {
 public:
  DeviceTelemetry Telemetry(int device) const override { return {}; }
  absl::StatusOr<int64_t> ForgetXids(int device) const override;
  int CollectiveSmBudget() const override { return 0; }
  double PreheatMs() const override { return 0; }
  int RanksPerGpu() const override { return 1; }
  bool LibraryAlgorithms() const override { return false; }
  absl::StatusOr<int64_t> FirstNonFinite(BufferRef src, DType dtype, int device) override;
  bool ReplaysGraphs() const override { return false; }
  absl::Status BeginCapture(StreamId origin) override;
  absl::StatusOr<GraphId> EndCapture(StreamId origin) override;
  absl::Status LaunchGraph(GraphId graph, StreamId stream) override;
  void DestroyGraph(GraphId graph) override {}
  bool HasGates() const override { return false; }
  absl::StatusOr<int64_t> HoldStreams(const std::vector<StreamId>& streams,
                                      double max_hold_ms) override;
  absl::Status ReleaseGate(int64_t ticket) override;
  int64_t GateTimeouts(int device) const override { return 0; }
  absl::Status EnqueueHostWork(StreamId stream, const std::vector<BufferRef>& buffers,
                               HostWork work) override;
  bool HostWorkOnBuffers() const override { return false; }
  bool IsLocalDevice(int device) const override { return true; }
  bool CrossProcessCollectives() const override { return false; }
  absl::StatusOr<std::string> NewCommunicatorId() override;
  absl::Status CrossProcessCollective(CollectiveOp op, const std::string& id, int nranks,
                                      const std::vector<int>& global_ranks,
                                      const CollectiveArgs& args) override;
};

}  // namespace overlap::engine
