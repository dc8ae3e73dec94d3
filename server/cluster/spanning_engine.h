// The engine of one part of a job that spans daemons: the whole mesh's
// devices, of which this daemon holds one node's.
//
// Every daemon of the job runs the same schedule for every rank of the mesh
// (ranks node-major: global device g is device g % D of node g / D). What a
// call enqueues on this node's devices runs on the daemon's engine; what it
// enqueues on another node's devices is that node's to run, and here only
// leaves a placeholder handle behind (buffers, events and streams of other
// nodes have no contents and no times). A collective whose ranks are all on
// this node runs on the engine's own collectives; one whose ranks live on
// several nodes runs, on each local rank's stream, as a Gloo collective
// (server/gloo/gloo_group.h) whose ranks meet in the coordinator's store, or
// where the engine has communicators across processes (NCCL on the CUDA
// backend) on one of those, its id handed round through the same store. The
// nodes synchronise only through those collectives: a wait on another node's
// event and a copy to or from another node's memory are INVALID_ARGUMENT
// (the p2p and direct transports need the peer's memory; the validator
// refuses them on groups that span nodes before anything runs).
//
// Thread safety: as the wrapped engine's; the handle tables and the groups
// have their own lock.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/engine/forwarding_engine.h"
#include "server/gloo/rendezvous_store.h"

namespace overlap::cluster {

// Where one part's ranks live.
struct SpanPlacement {
  int nodes = 1;
  int node_index = 0;
  // The daemon's own devices that run this node's ranks, in rank order.
  std::vector<int> local_devices;

  int devices_per_node() const { return static_cast<int>(local_devices.size()); }
  int world_size() const { return nodes * devices_per_node(); }
  int NodeOf(int global_device) const { return global_device / devices_per_node(); }
};

struct SpanningOptions {
  SpanPlacement placement;
  // Prefixes every group's keys in the store: the global job id.
  std::string job_key;
  // The address this node's Gloo connections bind to (its peer address's host).
  std::string bind_address = "127.0.0.1";
  // Connecting a group, and every collective across nodes.
  absl::Duration timeout = absl::Seconds(60);
};

class SpanningEngine final : public engine::ForwardingEngine {
 public:
  // `inner` and `store` must outlive the engine.
  SpanningEngine(engine::Engine& inner, gloo_group::RendezvousStore& store,
                 SpanningOptions options);
  ~SpanningEngine() override;

  int DeviceCount() const override { return options_.placement.world_size(); }
  engine::DeviceInfo GetDeviceInfo(int device) const override;
  int64_t MemoryInUse(int device) const override;
  engine::DeviceTelemetry Telemetry(int device) const override;
  bool IsLocalDevice(int device) const override;
  bool ReplaysGraphs() const override { return false; }
  int64_t GateTimeouts(int device) const override;

  engine::StreamId GetStream(int device, engine::StreamRole role, int index = 0) override;
  absl::StatusOr<engine::BufferId> Allocate(int device, size_t bytes) override;
  void Free(engine::BufferId buffer) override;
  absl::StatusOr<engine::EventId> CreateEvent(int device) override;
  void DestroyEvent(engine::EventId event) override;
  absl::Status RecordEvent(engine::EventId event, engine::StreamId stream) override;
  absl::Status WaitEvent(engine::StreamId stream, engine::EventId event) override;
  absl::StatusOr<double> ElapsedMs(engine::EventId start, engine::EventId end) override;

  absl::Status FillRandom(engine::StreamId stream, engine::BufferRef dst, DType dtype,
                          uint64_t seed, float scale) override;
  absl::Status FillConstant(engine::StreamId stream, engine::BufferRef dst, DType dtype,
                            float value) override;
  absl::Status Gemm(engine::StreamId stream, const engine::GemmArgs& args) override;
  absl::Status Accumulate(engine::StreamId stream, engine::BufferRef dst, engine::BufferRef src,
                          DType dtype) override;
  absl::Status AllGather(const engine::CollectiveArgs& args) override;
  absl::Status ReduceScatter(const engine::CollectiveArgs& args) override;
  absl::Status AllReduce(const engine::CollectiveArgs& args) override;
  absl::Status SendRecv(int channel, const std::vector<int>& group,
                        const std::vector<engine::Transfer>& transfers,
                        bool beside_gemm) override;
  absl::Status PeerCopy(engine::StreamId stream, engine::BufferRef dst, int dst_device,
                        engine::BufferRef src, int src_device) override;
  absl::Status Barrier(int channel, const std::vector<int>& devices,
                       const std::vector<engine::StreamId>& streams) override;
  absl::Status EnqueueHostWork(engine::StreamId stream,
                               const std::vector<engine::BufferRef>& buffers,
                               HostWork work) override;
  absl::Status CopyToHost(void* dst, engine::BufferRef src, int device) override;
  absl::Status CopyFromHost(engine::BufferRef dst, int device, const void* src) override;
  absl::StatusOr<int64_t> FirstNonFinite(engine::BufferRef src, DType dtype,
                                         int device) override;
  absl::Status Synchronize(const std::vector<int>& devices) override;
  absl::StatusOr<int64_t> HoldStreams(const std::vector<engine::StreamId>& streams,
                                      double max_hold_ms) override;
  absl::Status ReleaseGate(int64_t ticket) override;

 private:
  class LazyGroup;  // a Gloo group connected on its first collective

  // A stream, buffer or event of another node: a handle with nothing behind it.
  static bool IsRemoteHandle(int64_t id) { return id >= kRemoteHandleBase; }
  static bool IsRemoteStream(engine::StreamId id) { return id >= kRemoteStreamBase; }
  static constexpr int64_t kRemoteHandleBase = int64_t{1} << 40;
  static constexpr engine::StreamId kRemoteStreamBase = 1 << 24;

  int LocalDevice(int global_device) const;
  absl::Status CheckDevice(int device, const char* what) const;
  absl::Status CrossesNodes(const std::string& what) const;
  // The stream's (role, index), the same on every node: names a group's channel.
  std::string StreamName(engine::StreamId stream);
  absl::Status Collective(CollectiveOp op, const engine::CollectiveArgs& args);
  // The group of `members` (global devices) on `channel` used from streams
  // named `stream_name`, as rank `rank`.
  std::shared_ptr<LazyGroup> GroupFor(int channel, const std::string& stream_name,
                                      const std::vector<int>& members, int rank);
  // Where the engine has communicators across processes (NCCL): the id of the
  // group's, made on the node of its first rank and read from the store by
  // the others.
  absl::StatusOr<std::string> CommunicatorId(int channel, const std::string& stream_name,
                                             const std::vector<int>& members);
  // A float of `device` (global) that NCCL barriers reduce.
  absl::StatusOr<engine::BufferRef> BarrierScratch(int device);

  engine::Engine& inner_;
  gloo_group::RendezvousStore& store_;
  const SpanningOptions options_;

  absl::Mutex mu_;
  int64_t next_remote_ ABSL_GUARDED_BY(mu_) = kRemoteHandleBase;
  std::map<int64_t, int> remote_devices_ ABSL_GUARDED_BY(mu_);  // handle -> global device
  std::map<engine::StreamId, std::string> stream_names_ ABSL_GUARDED_BY(mu_);
  engine::StreamId next_remote_stream_ ABSL_GUARDED_BY(mu_) = kRemoteStreamBase;
  // (global device, role, index) -> handle, so that a stream asked for twice is one stream.
  std::map<std::tuple<int, int, int>, engine::StreamId> remote_streams_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<LazyGroup>> groups_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> comm_ids_ ABSL_GUARDED_BY(mu_);
  std::map<int, engine::BufferId> barrier_scratch_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap::cluster
