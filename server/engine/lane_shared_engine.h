// LaneSharedEngine: an engine for one user of devices that another thread
// also drives (the session lanes' thread and a job's executor thread beside
// it). The engine takes calls touching one device from one thread at a time
// (engine.h), so every call that enqueues work, creates or destroys a handle
// or queries an event holds the DeviceLanes enqueue mutexes of this user's
// devices (device_lanes.h) for its length, and the calls of the two users
// interleave whole.
//
// Why a mutex per device around each call, and not one thread that enqueues
// for both users: what the backends keep per device is host state their
// calls update without a lock of their own. On CUDA: a stream slot's GEMM
// chain and workspace (cuda_engine_impl.h StreamSlot), the device's cuBLASLt
// state (GemmLt), and the NCCL communicators of the device's lanes, which one
// thread at a time may use and which must see every rank's collectives in one
// order; a collective is issued for all its ranks in one call (one
// ncclGroupStart/End), so holding every device of the caller across the call
// keeps that order on every rank. On the host backend: each stream's worker
// queue and the hazard tracker. A mutex held across one call serialises all
// of it; moving a job's enqueues to the lanes' thread would also put its
// blocking waits (Synchronize, copies to the host) on the thread that must
// keep polling every session's doorbells.
//
// What holds no mutex: Synchronize, CopyToHost, CopyFromHost and
// FirstNonFinite, which wait for the device (CUDA polls cudaStreamQuery and
// the communicators' async errors, which a watchdog thread may do beside
// enqueues; the host backend waits on its workers), so that one user's wait
// never stalls the other's enqueues. No I/O runs under the mutexes.
//
// Gates() is null: a launch gate holds a device's streams for one user, and
// the streams are shared (a session's critical ops and a job's main ops go on
// the same compute streams). Graphs() is null too unless the engine is made
// with `graphs` (the session lanes): a job's replay orders other ranks' work
// around a launch only within the job (runner/graph_replay.h), while the
// lanes order every stream a graph recorded from around each of its launches
// (sessions/piece_graphs.h). A capture holds the devices' mutexes from
// BeginCapture to EndCapture, so that no other user's call lands on a stream
// while it records; the capturing thread's own calls in between take none.
//
// Thread safety: as the wrapped engine's, and calls for this user's devices
// may come from any thread while the other user calls from its own.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "server/engine/device_lanes.h"
#include "server/engine/forwarding_engine.h"
#include "server/engine/host_work.h"
#include "server/engine/shared_memory.h"

namespace overlap::engine {

class LaneSharedEngine : public ForwardingEngine {
 public:
  // `devices`: the ones this user's calls may touch (each call holds all of
  // their mutexes). `inner` and `lanes` must outlive the engine. `graphs`:
  // Graphs() forwards to the inner engine's (when it has one).
  LaneSharedEngine(Engine& inner, DeviceLanes& lanes, std::vector<int> devices,
                   bool graphs = false);
  ~LaneSharedEngine() override;

  GraphCapture* Graphs() const override;
  LaunchGates* Gates() const override { return nullptr; }
  HostWorkQueue* HostWork() const override;
  SharedMemory* Shared() const override;

  absl::StatusOr<BufferId> Allocate(int device, size_t bytes) override;
  void Free(BufferId buffer) override;
  absl::StatusOr<EventId> CreateEvent(int device) override;
  void DestroyEvent(EventId event) override;
  absl::Status RecordEvent(EventId event, StreamId stream) override;
  absl::Status WaitEvent(StreamId stream, EventId event) override;
  absl::StatusOr<double> ElapsedMs(EventId start, EventId end) override;
  absl::StatusOr<bool> EventDone(EventId event) override;
  absl::Status FillRandom(StreamId stream, BufferRef dst, DType dtype, uint64_t seed,
                          float scale) override;
  absl::Status FillConstant(StreamId stream, BufferRef dst, DType dtype, float value) override;
  absl::Status Gemm(StreamId stream, const GemmArgs& args) override;
  absl::Status Accumulate(StreamId stream, BufferRef dst, BufferRef src, DType dtype) override;
  absl::Status Elementwise(StreamId stream, const ElementwiseArgs& args) override;
  absl::Status AllGather(const CollectiveArgs& args) override;
  absl::Status ReduceScatter(const CollectiveArgs& args) override;
  absl::Status AllReduce(const CollectiveArgs& args) override;
  absl::Status SendRecv(int channel, const std::vector<int>& group,
                        const std::vector<Transfer>& transfers, bool beside_gemm) override;
  absl::Status PeerCopy(StreamId stream, BufferRef dst, int dst_device, BufferRef src,
                        int src_device) override;
  absl::Status Barrier(int channel, const std::vector<int>& devices,
                       const std::vector<StreamId>& streams) override;

  DeviceLanes& lanes() const { return lanes_; }
  // The mutexes of this user's devices, held for the lock's life; none on the
  // thread that is capturing a graph through this engine, which holds them.
  DeviceLanes::EnqueueLock Lock() const;

  // The wrapped engine's `method`, called under Lock(): every override is this
  // one forwarding, so it is written once.
  template <typename Method, typename... Args>
  decltype(auto) Locked(Method method, Args&&... args) const {
    const auto lock = Lock();
    return (inner().*method)(std::forward<Args>(args)...);
  }

 private:
  class LockedParts;
  class LockedGraphs;

  DeviceLanes& lanes_;
  const std::vector<int> devices_;  // sorted, unique
  std::unique_ptr<LockedParts> parts_;
  std::unique_ptr<LockedGraphs> graphs_;  // null without `graphs`
};

}  // namespace overlap::engine
