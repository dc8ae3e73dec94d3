// The concrete CUDA engine (see cuda_engine.h for the contract). Its methods are
// split by concern: cuda_engine.cc (setup, memory, events, host copies),
// cuda_engine_compute.cc (fills, GEMM, accumulate), cuda_engine_comm.cc
// (collectives, point-to-point, peer copies), cuda_engine_sync.cc (watchdog),
// cuda_engine_graph.cc (graph capture and replay), cuda_engine_gate.cc
// (launch gates), cuda_engine_shared_gpu.cc (collectives between ranks that
// share a GPU) and cuda_engine_shared_memory.cc (another process's memory and
// signals).
//
// Handles: StreamId = device * 4 + role * 2 + index, fixed at start; buffer and
// event ids count up from 1 and are never reused. The id maps are guarded by mu_,
// held only for look-ups; entries are copied out before any CUDA call.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/cuda/cuda_engine.h"
#include "server/cuda/cuda_resources.h"
#include "server/cuda/device_pool.h"
#include "server/cuda/driver_api.h"
#include "server/cuda/gemm_chain.h"
#include "server/cuda/gemm_lt.h"
#include "server/cuda/kernels.h"
#include "server/cuda/launch_gate.h"
#include "server/cuda/nccl_comms.h"
#include "server/cuda/nvml_telemetry.h"
#include "server/engine/engine_overrides.h"
#include "server/engine/gemm_checks.h"

namespace overlap::cuda {

struct GemmPointers;  // cuda_engine_compute.cc

class CudaEngineImpl final : public CudaEngine,
                             public engine::DeviceMonitor,
                             public engine::GraphCapture,
                             public engine::LaunchGates,
                             public engine::CrossProcessCollectives,
                             public engine::SharedMemory {
 public:
  static constexpr int kStreamsPerRole = 2;
  // Compute, comm (the critical lane) and deferred (the deferred lane).
  static constexpr int kStreamsPerDevice = 3 * kStreamsPerRole;

  static absl::StatusOr<std::unique_ptr<CudaEngineImpl>> Create(const DaemonConfig& config,
                                                                int device_count);
  ~CudaEngineImpl() override;

  std::string Name() const override { return "cuda"; }
  int DeviceCount() const override { return static_cast<int>(devices_.size()); }
  engine::DeviceInfo GetDeviceInfo(int device) const override;
  int CollectiveSmBudget() const override { return config_.nccl_overlap_ctas; }
  double PreheatMs() const override { return config_.preheat_ms; }
  int RanksPerGpu() const override { return config_.ranks_per_gpu; }
  bool LibraryAlgorithms() const override { return true; }
  bool GemmEpilogues() const override { return true; }
  engine::BackendVersions Versions() const override;

  // Its parts: graph replay with config graph_replay, gates where the launch
  // gate kernel loaded, and NCCL communicators across processes but not with
  // ranks_per_gpu above 1 (NCCL refuses two ranks of one communicator on one
  // GPU, across processes too).
  const engine::DeviceMonitor* Monitor() const override { return monitor_; }
  engine::GraphCapture* Graphs() const override {
    return config_.graph_replay ? capture_ : nullptr;
  }
  engine::LaunchGates* Gates() const override { return gate_ != nullptr ? gates_ : nullptr; }
  engine::CrossProcessCollectives* CrossProcess() const override {
    return config_.ranks_per_gpu == 1 ? cross_process_ : nullptr;
  }
  engine::SharedMemory* Shared() const override { return shared_; }

  int StreamsPerRole() const override { return kStreamsPerRole; }
  std::string DescribeLanes() const override;
  OVERLAP_ENGINE_WORK_OVERRIDES;

  int MultiprocessorCount(int device) const override;

  // DeviceMonitor
  int64_t MemoryInUse(int device) const override;
  engine::DeviceTelemetry Telemetry(int device) const override;
  absl::StatusOr<int64_t> ForgetXids(int device) const override;
  absl::StatusOr<double> EnergyJoules(int device) const override;
  absl::Duration EnergyCounterPeriod(int device) const override;
  bool Healthy() const override;

  // GraphCapture
  absl::Status BeginCapture(engine::StreamId origin) override;
  absl::StatusOr<std::vector<engine::StreamId>> JoinedStreams(engine::StreamId origin) override;
  absl::StatusOr<engine::GraphId> EndCapture(engine::StreamId origin) override;
  absl::Status LaunchGraph(engine::GraphId graph, engine::StreamId stream) override;
  void DestroyGraph(engine::GraphId graph) override;

  // LaunchGates
  absl::StatusOr<int64_t> HoldStreams(const std::vector<engine::StreamId>& streams,
                                      double max_hold_ms) override;
  absl::Status ReleaseGate(int64_t ticket) override;
  int64_t GateTimeouts(int device) const override;

  // CrossProcessCollectives
  absl::StatusOr<std::string> NewCommunicatorId() override;
  absl::Status CrossProcessCollective(engine::CollectiveOp op, const std::string& id, int nranks,
                                      const std::vector<int>& global_ranks,
                                      const engine::CollectiveArgs& args) override;

  // SharedMemory (cuda_engine_shared_memory.cc). WaitValue cannot enforce its
  // deadline: a stream waits in the GPU's front end until the word is written.
  // Free of an imported buffer waits for the busy streams first, so a stream
  // still waiting for a word that will never come must be released (its word
  // written) before the buffer is freed.
  absl::StatusOr<engine::BufferId> ImportBuffer(int device, int fd, size_t offset,
                                                size_t bytes) override;
  absl::Status WaitValue(engine::StreamId stream, engine::BufferRef word, uint64_t value,
                         absl::Time deadline) override;
  absl::Status WriteValue(engine::StreamId stream, engine::BufferRef word, uint64_t value) override;

 private:
  // The CTA cap of the communicator a collective uses (0 = NCCL's choice):
  // the deferred lane's, or the budget beside a GEMM.
  int CtasFor(bool beside_gemm, int channel) const {
    if (channel == engine::kDeferredLaneChannel) return config_.deferred_lane_ctas;
    return beside_gemm ? config_.nccl_overlap_ctas : 0;
  }

  struct StreamSlot {
    int device = 0;
    engine::StreamRole role = engine::StreamRole::kCompute;
    CudaStream stream;
    // workspace[1] exists with programmatic_edges on, for the GEMM that may
    // start while the previous one on this stream still runs (gemm_chain.h).
    void* workspace[2] = {nullptr, nullptr};
    size_t workspace_bytes = 0;
    std::unique_ptr<GemmChain> chain;  // null with programmatic_edges off
    CudaEvent fence;                   // recorded where Barrier or a stand-in fences this stream
  };
  struct DeviceState {
    int index = 0;
    std::string name, pci_bus_id;
    std::string model_name, uuid;  // the GPU's, without the shared-by note
    int sm_count = 0;
    std::unique_ptr<DevicePool> pool;
    std::unique_ptr<GemmLt> gemm;
    size_t reserved_bytes = 0;  // workspaces + scratch, not counted as in use
  };
  // Another process's allocation mapped here (ImportBuffer): the driver's
  // handles, in driver API types (cuda_engine_shared_memory.cc).
  struct ImportedMapping {
    uint64_t handle = 0;  // CUmemGenericAllocationHandle
    uint64_t base = 0;    // CUdeviceptr of the reserved range, mapped from offset 0
    size_t size = 0;      // bytes mapped: the whole allocation
    size_t reserved = 0;  // bytes of address space reserved
  };
  struct BufferEntry {
    int device = 0;
    char* ptr = nullptr;
    size_t bytes = 0;
    // Set for an imported buffer: Free unmaps it instead of returning it to the pool.
    std::optional<ImportedMapping> imported;
  };
  struct GraphExecDeleter {
    void operator()(cudaGraphExec_t exec) const noexcept;
  };
  struct GraphEntry {
    int device = 0;  // of the origin stream
    std::shared_ptr<CUgraphExec_st> exec;
  };
  struct EventEntry {
    int device = 0;
    std::shared_ptr<CudaEvent> event;
    bool recorded = false;
  };
  // What a collective needs of one rank, resolved and checked.
  struct RankPtrs {
    int device;
    cudaStream_t stream;
    void* send;
    void* recv;
    const StreamSlot* slot;
  };
  // One transfer of a point-to-point group, resolved and checked.
  struct PeerTransfer {
    int src_rank, dst_rank;
    const StreamSlot* src_slot;
    const StreamSlot* dst_slot;
    const char* src;
    char* dst;
    size_t bytes;
  };
  enum class CollectiveKind { kAllGather, kReduceScatter, kAllReduce };

  explicit CudaEngineImpl(const DaemonConfig& config);
  absl::Status InitDevice(int device);
  void EnablePeerAccess();

  bool ValidDevice(int device) const { return device >= 0 && device < DeviceCount(); }
  // A copy of the entry `id` of `entries` (a map mu_ guards; the caller holds
  // it); INVALID_ARGUMENT "unknown KIND ID" when there is none.
  template <typename Map>
  static absl::StatusOr<typename Map::mapped_type> CopyEntry(const Map& entries,
                                                             const typename Map::key_type& id,
                                                             const char* kind) {
    auto it = entries.find(id);
    if (it == entries.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown ", kind, " ", id));
    }
    return it->second;
  }
  // Removes `id` from `entries` (a map mu_ guards; the caller holds it) and
  // returns its entry, so that what it owns is released after the lock;
  // nullopt when there is none.
  template <typename Map>
  static std::optional<typename Map::mapped_type> TakeEntry(Map& entries,
                                                            const typename Map::key_type& id) {
    auto node = entries.extract(id);
    if (node.empty()) return std::nullopt;
    return std::move(node.mapped());
  }
  absl::StatusOr<const StreamSlot*> LookupStream(engine::StreamId stream) const;
  absl::StatusOr<BufferEntry> LookupBuffer(engine::BufferId buffer) const;
  absl::StatusOr<EventEntry> LookupEvent(engine::EventId event) const;
  absl::StatusOr<GraphEntry> LookupGraph(engine::GraphId graph) const;
  // ptr of `ref`, checked to lie inside its buffer, on `device` unless device < 0.
  absl::StatusOr<char*> Resolve(const engine::BufferRef& ref, int device, const char* what) const;
  // A GEMM's operands and scales as pointers (C may be a peer's with
  // c_on_peer, where peer access allows it).
  absl::StatusOr<GemmPointers> ResolveGemm(const StreamSlot& slot, const engine::GemmArgs& args,
                                           const engine::GemmOperands& checked);
  // Validates, gets the group's communicators and issues `call` for every rank
  // inside one NCCL group.
  absl::Status RunCollective(const engine::CollectiveArgs& args, CollectiveKind kind,
                             size_t send_elems, size_t recv_elems, const char* op,
                             const std::function<ncclResult_t(const RankPtrs&, ncclComm_t)>& call);
  absl::StatusOr<std::vector<RankPtrs>> PrepareCollective(const engine::CollectiveArgs& args,
                                                          size_t send_elems, size_t recv_elems,
                                                          const char* op) const;
  // Issues `issue(rank)` for every rank inside one NCCL group, then waits for the
  // enqueue to finish; an NCCL error aborts the communicators of these devices.
  template <typename IssueFn>
  absl::Status RunGroup(NcclGroup& group, const IssueFn& issue, const char* op);
  // NCCL refuses two ranks on one GPU (config ranks_per_gpu): between such
  // ranks copies and the reduction kernel stand in for its collectives and
  // send/recv groups (cuda_engine_shared_gpu.cc), with the same semantics.
  // True when two ranks of `devices` share a GPU; INVALID_ARGUMENT (as
  // NcclComms::Get) when a device repeats or the channel is negative,
  // FAILED_PRECONDITION when two of its GPUs lack peer access.
  absl::StatusOr<bool> NeedsStandIn(const std::vector<int>& devices, int channel) const;
  absl::Status StandInCollective(CollectiveKind kind, DType dtype, size_t count,
                                 const std::vector<RankPtrs>& ranks);
  absl::Status StandInSendRecv(const std::vector<PeerTransfer>& transfers);
  // No stream of `slots` passes this point before all of them reached it
  // (Barrier, and both sides of a stand-in).
  absl::Status FenceStreams(const std::vector<const StreamSlot*>& slots);
  absl::Status AbortAfterNcclError(const std::vector<int>& devices, const absl::Status& error,
                                   const char* op);

  // A fill of `dst` (named `what` in errors) on `stream`: checked, then
  // `launch` enqueues it given dst's address, element type and count.
  absl::Status LaunchFill(
      engine::StreamId stream, const engine::BufferRef& dst, DType dtype, const char* what,
      const std::function<cudaError_t(char*, ElemType, size_t, cudaStream_t)>& launch);
  // CopyToHost (to_host) and CopyFromHost: `host` and the buffer `ref`, copied
  // on the device's first comm stream once the device is idle, and waited for.
  absl::Status HostCopy(const engine::BufferRef& ref, int device, bool to_host, void* host);

  // The watchdog behind Synchronize, CopyTo/FromHost and GEMM tuning.
  absl::Status WaitIdle(const std::vector<int>& devices);
  // Polls until the devices' streams are idle or `timeout_s` passes; true when idle.
  absl::StatusOr<bool> PollStreamsIdle(const std::vector<int>& devices, double timeout_s,
                                       bool check_nccl);
  // Unmaps and releases an imported buffer's mapping once every stream that
  // was busy is idle; logs what fails.
  void ReleaseImported(engine::BufferId buffer, const ImportedMapping& mapping);
  // The device address of a signal word of `stream` (8 bytes, 8-aligned, of
  // an imported buffer of the stream's device).
  absl::StatusOr<uint64_t> SignalWord(const StreamSlot& slot, const engine::BufferRef& word,
                                      const char* op) const;
  // Runs a stream memory operation (driver_api.h) on the signal word from
  // `stream`'s device.
  using SignalOperation = absl::Status (*)(CUstream, CUdeviceptr, uint64_t);
  absl::Status OnSignalWord(engine::StreamId stream, const engine::BufferRef& word, const char* op,
                            SignalOperation operation, uint64_t value);

  const DaemonConfig config_;
  // The parts this engine is (it implements each itself).
  const engine::DeviceMonitor* const monitor_ = this;
  engine::GraphCapture* const capture_ = this;
  engine::LaunchGates* const gates_ = this;
  engine::CrossProcessCollectives* const cross_process_ = this;
  engine::SharedMemory* const shared_ = this;
  std::vector<StreamSlot> streams_;  // immutable after Create
  std::vector<std::unique_ptr<DeviceState>> devices_;
  std::vector<std::vector<bool>> peer_access_;  // [from][to]
  std::atomic<bool> healthy_{true};

  mutable absl::Mutex mu_;
  std::map<engine::BufferId, BufferEntry> buffers_ ABSL_GUARDED_BY(mu_);
  std::map<engine::EventId, EventEntry> events_ ABSL_GUARDED_BY(mu_);
  // The critical and deferred lanes' stream priorities (set with the streams).
  std::pair<int, int> lane_priorities_ = {0, 0};
  int64_t next_buffer_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t next_event_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<engine::GraphId, GraphEntry> graphs_ ABSL_GUARDED_BY(mu_);
  int64_t next_graph_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::unique_ptr<LaunchGate> gate_;  // null with launch_gate off or no pinned memory

  // Declared last: destroyed first, while streams and pools still exist.
  std::unique_ptr<NcclComms> comms_;
  std::unique_ptr<NvmlTelemetry> nvml_;  // null without NVML
};

}  // namespace overlap::cuda
