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
// several nodes goes to the cross-node transport the engine can carry
// (cross_node_transport.h: NCCL's communicators across processes on the CUDA
// backend, Gloo over host memory on the host backend), whose ranks meet in
// the coordinator's store. The
// nodes synchronise only through those collectives: a wait on another node's
// event and a copy to or from another node's memory are INVALID_ARGUMENT
// (the p2p and direct transports need the peer's memory; the validator
// refuses them on groups that span nodes before anything runs).
//
// Thread safety: as the wrapped engine's; the handle tables and the
// transport's groups have their own locks.
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
#include "server/cluster/cross_node_transport.h"
#include "server/cluster/span_placement.h"
#include "server/engine/engine_overrides.h"
#include "server/engine/forwarding_engine.h"
#include "server/gloo/rendezvous_store.h"

namespace overlap::cluster {

class SpanningEngine final : public engine::ForwardingEngine,
                             public engine::LaunchGates,
                             public engine::HostWorkQueue {
 public:
  // `inner` and `store` must outlive the engine. Collectives across nodes go
  // to the transport `inner` can carry (TransportFor); without one they are
  // FAILED_PRECONDITION.
  SpanningEngine(engine::Engine& inner, gloo_group::RendezvousStore& store,
                 SpanningOptions options);
  ~SpanningEngine() override;

  int DeviceCount() const override { return options_.placement.world_size(); }
  engine::DeviceInfo GetDeviceInfo(int device) const override;
  bool IsLocalDevice(int device) const override;

  // Its parts: gates and host work where the wrapped engine has them (on this
  // node's streams); no monitor (the daemon watches its devices through its
  // own engine), no graph replay (a graph cannot hold another node's work),
  // and no library collectives across processes of its own (the transport
  // uses the wrapped engine's).
  const engine::DeviceMonitor* Monitor() const override { return nullptr; }
  engine::GraphCapture* Graphs() const override { return nullptr; }
  engine::LaunchGates* Gates() const override {
    return inner_.Gates() != nullptr ? gates_ : nullptr;
  }
  engine::HostWorkQueue* HostWork() const override {
    return inner_.HostWork() != nullptr ? host_work_ : nullptr;
  }
  engine::CrossProcessCollectives* CrossProcess() const override { return nullptr; }

  // Every work call: this node's devices run theirs, others' leave placeholders.
  OVERLAP_ENGINE_WORK_OVERRIDES;

  // LaunchGates: holds this node's streams only.
  absl::StatusOr<int64_t> HoldStreams(const std::vector<engine::StreamId>& streams,
                                      double max_hold_ms) override;
  absl::Status ReleaseGate(int64_t ticket) override;
  int64_t GateTimeouts(int device) const override;

  // HostWorkQueue: work on another node's stream is that node's to run.
  absl::Status EnqueueHostWork(engine::StreamId stream,
                               const std::vector<engine::HostWorkBuffer>& buffers,
                               Work work) override;

 private:
  // A stream, buffer or event of another node: a handle with nothing behind it.
  static bool IsRemoteHandle(int64_t id) { return id >= kRemoteHandleBase; }
  static bool IsRemoteStream(engine::StreamId id) { return id >= kRemoteStreamBase; }
  // Work on another node's stream is that node's: nothing to enqueue here.
  template <typename Enqueue>
  static absl::Status IfLocal(engine::StreamId stream, Enqueue enqueue) {
    return IsRemoteStream(stream) ? absl::OkStatus() : enqueue();
  }
  static constexpr int64_t kRemoteHandleBase = int64_t{1} << 40;
  static constexpr engine::StreamId kRemoteStreamBase = 1 << 24;

  int LocalDevice(int global_device) const;
  absl::Status CheckDevice(int device, const char* what) const;
  absl::Status CrossesNodes(const std::string& what) const;
  // The stream's (role, index), the same on every node: names a group's channel.
  std::string StreamName(engine::StreamId stream);
  absl::Status Collective(engine::CollectiveOp op, const engine::CollectiveArgs& args);
  // The group of `members` (global devices) on `channel`, used from `stream`.
  CrossNodeGroup GroupOf(int channel, engine::StreamId stream, const std::vector<int>& members);
  absl::Status NoTransport() const;

  engine::Engine& inner_;
  engine::LaunchGates* const gates_ = this;
  engine::HostWorkQueue* const host_work_ = this;
  gloo_group::RendezvousStore& store_;
  const SpanningOptions options_;
  // Null where the engine can carry none.
  const std::unique_ptr<CrossNodeTransport> transport_;

  absl::Mutex mu_;
  int64_t next_remote_ ABSL_GUARDED_BY(mu_) = kRemoteHandleBase;
  std::map<int64_t, int> remote_devices_ ABSL_GUARDED_BY(mu_);  // handle -> global device
  std::map<engine::StreamId, std::string> stream_names_ ABSL_GUARDED_BY(mu_);
  engine::StreamId next_remote_stream_ ABSL_GUARDED_BY(mu_) = kRemoteStreamBase;
  // (global device, role, index) -> handle, so that a stream asked for twice is one stream.
  std::map<std::tuple<int, int, int>, engine::StreamId> remote_streams_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap::cluster
