#include "server/engine/lane_shared_engine.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace overlap::engine {

// The parts the lanes use (SharedMemory, HostWorkQueue), each call under the
// same mutexes as the engine's own calls.
class LaneSharedEngine::LockedParts : public SharedMemory, public HostWorkQueue {
 public:
  explicit LockedParts(const LaneSharedEngine& engine) : engine_(engine) {}

  SharedMemory* shared() { return engine_.inner().Shared() != nullptr ? this : nullptr; }
  HostWorkQueue* host_work() { return engine_.inner().HostWork() != nullptr ? this : nullptr; }

  absl::StatusOr<BufferId> ImportBuffer(int device, int fd, size_t offset, size_t bytes) override {
    const auto lock = engine_.Lock();
    return engine_.inner().Shared()->ImportBuffer(device, fd, offset, bytes);
  }
  absl::Status WaitValue(StreamId stream, BufferRef word, uint64_t value,
                         absl::Time deadline) override {
    const auto lock = engine_.Lock();
    return engine_.inner().Shared()->WaitValue(stream, word, value, deadline);
  }
  absl::Status WriteValue(StreamId stream, BufferRef word, uint64_t value) override {
    const auto lock = engine_.Lock();
    return engine_.inner().Shared()->WriteValue(stream, word, value);
  }
  absl::Status EnqueueHostWork(StreamId stream, const std::vector<HostWorkBuffer>& buffers,
                               Work work) override {
    const auto lock = engine_.Lock();
    return engine_.inner().HostWork()->EnqueueHostWork(stream, buffers, std::move(work));
  }

 private:
  const LaneSharedEngine& engine_;
};

namespace {

// The engine whose capture this thread is recording: its calls skip the
// mutexes that BeginCapture took for the whole capture.
thread_local const LaneSharedEngine* t_capturing = nullptr;

const std::vector<int>& NoDevices() {
  static const auto* none = new std::vector<int>();
  return *none;
}

}  // namespace

// The inner engine's GraphCapture, the devices' mutexes held across a whole
// capture (see the header).
class LaneSharedEngine::LockedGraphs : public GraphCapture {
 public:
  explicit LockedGraphs(const LaneSharedEngine& engine) : engine_(engine) {}

  GraphCapture* graphs() { return engine_.inner().Graphs() != nullptr ? this : nullptr; }

  absl::Status BeginCapture(StreamId origin) override {
    if (t_capturing != nullptr) {
      return absl::FailedPreconditionError("BeginCapture: this thread is already capturing");
    }
    held_.emplace(engine_.lanes_, engine_.devices_);
    const absl::Status begun = inner().BeginCapture(origin);
    if (!begun.ok()) {
      held_.reset();
      return begun;
    }
    t_capturing = &engine_;
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<StreamId>> JoinedStreams(StreamId origin) override {
    const auto lock = engine_.Lock();
    return inner().JoinedStreams(origin);
  }
  absl::StatusOr<GraphId> EndCapture(StreamId origin) override {
    absl::StatusOr<GraphId> graph = inner().EndCapture(origin);
    if (t_capturing == &engine_) {
      t_capturing = nullptr;
      held_.reset();
    }
    return graph;
  }
  absl::Status LaunchGraph(GraphId graph, StreamId stream) override {
    const auto lock = engine_.Lock();
    return inner().LaunchGraph(graph, stream);
  }
  void DestroyGraph(GraphId graph) override {
    const auto lock = engine_.Lock();
    inner().DestroyGraph(graph);
  }

 private:
  GraphCapture& inner() const { return *engine_.inner().Graphs(); }

  const LaneSharedEngine& engine_;
  // The devices' mutexes while a capture records (one capture at a time: the
  // lanes make every call from one thread).
  std::optional<DeviceLanes::EnqueueLock> held_;
};

namespace {

std::vector<int> SortedUnique(std::vector<int> devices) {
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  return devices;
}

}  // namespace

LaneSharedEngine::LaneSharedEngine(Engine& inner, DeviceLanes& lanes, std::vector<int> devices,
                                   bool graphs)
    : ForwardingEngine(inner),
      lanes_(lanes),
      devices_(SortedUnique(std::move(devices))),
      parts_(std::make_unique<LockedParts>(*this)),
      graphs_(graphs ? std::make_unique<LockedGraphs>(*this) : nullptr) {}

LaneSharedEngine::~LaneSharedEngine() = default;

DeviceLanes::EnqueueLock LaneSharedEngine::Lock() const {
  return DeviceLanes::EnqueueLock(lanes_, t_capturing == this ? NoDevices() : devices_);
}

GraphCapture* LaneSharedEngine::Graphs() const {
  return graphs_ != nullptr ? graphs_->graphs() : nullptr;
}

HostWorkQueue* LaneSharedEngine::HostWork() const { return parts_->host_work(); }
SharedMemory* LaneSharedEngine::Shared() const { return parts_->shared(); }

absl::StatusOr<BufferId> LaneSharedEngine::Allocate(int device, size_t bytes) {
  return Locked(&Engine::Allocate, device, bytes);
}
void LaneSharedEngine::Free(BufferId buffer) { Locked(&Engine::Free, buffer); }
absl::StatusOr<EventId> LaneSharedEngine::CreateEvent(int device) {
  return Locked(&Engine::CreateEvent, device);
}
void LaneSharedEngine::DestroyEvent(EventId event) { Locked(&Engine::DestroyEvent, event); }
absl::Status LaneSharedEngine::RecordEvent(EventId event, StreamId stream) {
  return Locked(&Engine::RecordEvent, event, stream);
}
absl::Status LaneSharedEngine::WaitEvent(StreamId stream, EventId event) {
  return Locked(&Engine::WaitEvent, stream, event);
}
absl::StatusOr<double> LaneSharedEngine::ElapsedMs(EventId start, EventId end) {
  return Locked(&Engine::ElapsedMs, start, end);
}
absl::StatusOr<bool> LaneSharedEngine::EventDone(EventId event) {
  return Locked(&Engine::EventDone, event);
}
absl::Status LaneSharedEngine::FillRandom(StreamId stream, BufferRef dst, DType dtype,
                                          uint64_t seed, float scale) {
  return Locked(&Engine::FillRandom, stream, dst, dtype, seed, scale);
}
absl::Status LaneSharedEngine::FillConstant(StreamId stream, BufferRef dst, DType dtype,
                                            float value) {
  return Locked(&Engine::FillConstant, stream, dst, dtype, value);
}
absl::Status LaneSharedEngine::Gemm(StreamId stream, const GemmArgs& args) {
  return Locked(&Engine::Gemm, stream, args);
}
absl::Status LaneSharedEngine::Accumulate(StreamId stream, BufferRef dst, BufferRef src,
                                          DType dtype) {
  return Locked(&Engine::Accumulate, stream, dst, src, dtype);
}
absl::Status LaneSharedEngine::Elementwise(StreamId stream, const ElementwiseArgs& args) {
  return Locked(&Engine::Elementwise, stream, args);
}
absl::Status LaneSharedEngine::AllGather(const CollectiveArgs& args) {
  return Locked(&Engine::AllGather, args);
}
absl::Status LaneSharedEngine::ReduceScatter(const CollectiveArgs& args) {
  return Locked(&Engine::ReduceScatter, args);
}
absl::Status LaneSharedEngine::AllReduce(const CollectiveArgs& args) {
  return Locked(&Engine::AllReduce, args);
}
absl::Status LaneSharedEngine::SendRecv(int channel, const std::vector<int>& group,
                                        const std::vector<Transfer>& transfers, bool beside_gemm) {
  return Locked(&Engine::SendRecv, channel, group, transfers, beside_gemm);
}
absl::Status LaneSharedEngine::PeerCopy(StreamId stream, BufferRef dst, int dst_device,
                                        BufferRef src, int src_device) {
  return Locked(&Engine::PeerCopy, stream, dst, dst_device, src, src_device);
}
absl::Status LaneSharedEngine::Barrier(int channel, const std::vector<int>& devices,
                                       const std::vector<StreamId>& streams) {
  return Locked(&Engine::Barrier, channel, devices, streams);
}

}  // namespace overlap::engine
