// The host engine's class, shared by its .cc files (not a public header: use
// host_engine.h).
//
// Locking: mu_ guards all bookkeeping and is held for the whole of an enqueue
// (validate, hazard check, push to the stream queues). Stream threads never take
// mu_, and no call waits for a stream while holding it, so a stream blocked in a
// collective's rendezvous can never stall the thread that enqueues its partners.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/engine/engine.h"
#include "server/engine/engine_overrides.h"
#include "server/engine/host/hazard_tracker.h"
#include "server/engine/host/host_engine.h"
#include "server/engine/host/stream_worker.h"

namespace overlap::engine::host {

// Releases a buffer's bytes: heap memory (the default), or a shared mapping
// of another process's memory that begins `map_offset` bytes before them.
struct StorageDeleter {
  bool mapped = false;
  size_t map_offset = 0;
  size_t map_bytes = 0;
  void operator()(uint8_t* data) const noexcept;  // host_engine_shared_memory.cc
};
// Buffer memory is shared with the tasks that use it, so a Free racing with
// another device's queued work can never leave that work a dangling pointer.
struct Storage {
  std::unique_ptr<uint8_t[], StorageDeleter> data;
};

class HostEngine final : public EngineDefaults,
                         public DeviceMonitor,
                         public LaunchGates,
                         public HostWorkQueue,
                         public SharedMemory {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const HostEngineOptions& options);
  ~HostEngine() override;

  std::string Name() const override { return "host"; }
  int DeviceCount() const override { return options_.device_count; }
  DeviceInfo GetDeviceInfo(int device) const override;
  BackendVersions Versions() const override;
  double PreheatMs() const override { return options_.preheat_ms; }
  int StreamsPerRole() const override { return options_.streams_per_role; }
  std::string DescribeLanes() const override {
    return "critical lane: comm streams, ahead of the deferred lane on their device; deferred "
           "lane: deferred streams, each task yielding to a running critical one for up to 2 ms";
  }
  OVERLAP_ENGINE_WORK_OVERRIDES;

  // Its parts: gates only when they are on; every buffer is host memory.
  const DeviceMonitor* Monitor() const override { return monitor_; }
  LaunchGates* Gates() const override { return options_.launch_gate ? gates_ : nullptr; }
  HostWorkQueue* HostWork() const override { return host_work_; }
  SharedMemory* Shared() const override { return shared_; }

  // DeviceMonitor
  int64_t MemoryInUse(int device) const override;
  DeviceTelemetry Telemetry(int device) const override;
  absl::StatusOr<int64_t> ForgetXids(int device) const override;
  absl::StatusOr<double> EnergyJoules(int device) const override;
  absl::Duration EnergyCounterPeriod(int) const override { return options_.energy_counter_period; }
  bool Healthy() const override { return healthy_.load(); }
  bool GemmEpilogues() const override { return true; }

  // LaunchGates
  absl::StatusOr<int64_t> HoldStreams(const std::vector<StreamId>& streams,
                                      double max_hold_ms) override;
  absl::Status ReleaseGate(int64_t ticket) override;
  int64_t GateTimeouts(int device) const override;

  // HostWorkQueue
  absl::Status EnqueueHostWork(StreamId stream, const std::vector<HostWorkBuffer>& buffers,
                               Work work) override;

  // SharedMemory (host_engine_shared_memory.cc)
  absl::StatusOr<BufferId> ImportBuffer(int device, int fd, size_t offset, size_t bytes) override;
  absl::Status WaitValue(StreamId stream, BufferRef word, uint64_t value,
                         absl::Time deadline) override;
  absl::Status WriteValue(StreamId stream, BufferRef word, uint64_t value) override;

 private:
  struct Buffer {
    int device = 0;
    size_t bytes = 0;
    std::shared_ptr<Storage> storage;
    // Mapped from another process (ImportBuffer): not counted in memory_in_use_.
    bool imported = false;
  };
  struct Event {
    int device = 0;
    std::shared_ptr<EventRecord> latest;  // null until the first record
    HazardTracker::Clock snapshot;
  };
  struct Stream {
    int device = 0;
    std::string name;  // "comm0@dev1"
    std::unique_ptr<StreamWorker> worker;
  };
  // A validated byte range: where it lives and who keeps it alive.
  struct Range {
    BufferId buffer = kNoBuffer;
    std::shared_ptr<Storage> storage;
    size_t offset = 0;
    size_t bytes = 0;
    uint8_t* data() const { return storage->data.get() + offset; }
  };
  enum class CollectiveKind { kAllGather, kReduceScatter, kAllReduce };
  static constexpr int kRoles = 3;  // comm, compute, deferred: each streams_per_role streams

  explicit HostEngine(const HostEngineOptions& options);

  // Validation (INVALID_ARGUMENT naming `what`).
  absl::Status CheckDevice(int device, absl::string_view what) const;
  absl::StatusOr<const Stream*> FindStream(StreamId stream, absl::string_view what) const;
  absl::StatusOr<Range> Resolve(const BufferRef& ref, int device, absl::string_view what) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Range> ResolveTyped(const BufferRef& ref, int device, DType dtype,
                                     absl::string_view what) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<StreamId> DeviceStreams(absl::Span<const int> devices) const;
  absl::StatusOr<Event*> FindEvent(EventId event, absl::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Sticky and injected failures. Returns false when the call must not do its
  // work; *result is then what the call returns.
  bool PassFailurePoint(const char* op, absl::Span<const StreamId> streams, absl::Status* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The hazard check of one op (OK when checks are off); a race is also recorded
  // as an asynchronous error of the streams' devices.
  absl::Status CheckHazards(absl::Span<const StreamId> streams, absl::Span<const Access> accesses,
                            const char* op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A fill of `dst` as `op` (failure point and hazard name `point`): checked
  // now, then `fill` runs on the stream with dst's bytes and its element count.
  absl::Status EnqueueFill(StreamId stream, const BufferRef& dst, DType dtype, const char* op,
                           const char* point, std::function<void(uint8_t*, size_t)> fill);
  void RecordError(int device, const absl::Status& status);
  void WaitIdle(absl::Span<const int> devices);
  absl::Status Collective(CollectiveKind kind, const CollectiveArgs& args);
  absl::Status HostCopy(BufferRef ref, int device, bool to_host, void* host);
  // A signal word of `stream` (SharedMemory): 8 bytes, 8-aligned in memory, of
  // an imported buffer of the stream's device; enqueues `task` with its address
  // once the hazard check (`op` accessing it, a write when `write`) passed.
  absl::Status EnqueueSignal(StreamId stream, const BufferRef& word, const char* op, bool write,
                             std::function<void(int device, uint64_t* word)> task);

  const HostEngineOptions options_;
  const absl::Time created_ = absl::Now();  // the simulated energy counter's zero
  // The parts this engine is (it implements each itself).
  const DeviceMonitor* const monitor_ = this;
  LaunchGates* const gates_ = this;
  HostWorkQueue* const host_work_ = this;
  SharedMemory* const shared_ = this;
  std::vector<Stream> streams_;  // fixed at construction; index = StreamId
  // Shared with the hold tasks, which may outlive a stream's queue entry.
  std::shared_ptr<LaunchGate> gate_;
  std::atomic<bool> healthy_{true};

  mutable absl::Mutex mu_;
  std::unordered_map<BufferId, Buffer> buffers_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<EventId, Event> events_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> memory_in_use_ ABSL_GUARDED_BY(mu_);
  BufferId next_buffer_ ABSL_GUARDED_BY(mu_) = 1;
  EventId next_event_ ABSL_GUARDED_BY(mu_) = 1;
  std::unique_ptr<HazardTracker> hazards_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> call_counts_ ABSL_GUARDED_BY(mu_);
  absl::Status sticky_ ABSL_GUARDED_BY(mu_);

  // Asynchronous errors, written by stream threads too.
  struct DeviceError {
    absl::Status status;
    uint64_t sequence = 0;
  };
  absl::Mutex errors_mu_;
  std::vector<DeviceError> errors_ ABSL_GUARDED_BY(errors_mu_);
  uint64_t error_sequence_ ABSL_GUARDED_BY(errors_mu_) = 0;
};

}  // namespace overlap::engine::host
