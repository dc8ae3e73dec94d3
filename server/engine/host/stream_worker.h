// Execution primitives of the host engine: a stream is one worker thread that
// runs its tasks in order; an event record completes when its stream reaches
// it; a rendezvous lines up the ranks of one collective.
//
// Deadlock freedom rests on one rule kept by the engine: a task only ever waits
// for work enqueued before it (an event record made before the wait call, or
// the other ranks' parts of the same collective, which are enqueued together).
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace overlap::engine::host {

// Stream priority on the host, per device: a low-priority worker (the
// deferred lane) holds each task back while a high-priority one (the critical
// lane) of its device runs a task, for at most `max_yield`, as a GPU's block
// scheduler favours a high-priority stream's blocks without starving the
// others. Bounded, so that a critical task waiting for deferred work (or for
// a peer) cannot hold the deferred lane forever. Thread-safe.
class PriorityGate {
 public:
  void HighBegin();
  void HighEnd();
  // Returns once no high-priority task runs, or after `max_yield`.
  void LowWait(absl::Duration max_yield);

 private:
  bool NoHighLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return high_running_ == 0; }
  absl::Mutex mu_;
  int high_running_ ABSL_GUARDED_BY(mu_) = 0;
};

enum class WorkerPriority { kNormal, kHigh, kLow };

// How long a low-priority task yields to high-priority ones at most.
inline constexpr absl::Duration kMaxLowPriorityYield = absl::Milliseconds(2);

// How long an idle worker watches its queue before it sleeps (StreamWorker).
inline constexpr std::chrono::microseconds kSpinBeforeSleep{100};

// One in-order queue served by its own thread. Thread-safe.
//
// Enqueues come in bursts (a session command's half-dozen tasks, an op's
// pieces), and each one onto a sleeping worker costs a futex wake and, on a
// host of few cores, a context switch that the enqueuing thread pays for. So
// a worker whose queue ran empty yields for up to kSpinBeforeSleep, watching
// the queue's length, before it sleeps: a burst wakes it once. Bounded, so an
// idle stream costs nothing after that.
class StreamWorker {
 public:
  explicit StreamWorker(std::string name, std::shared_ptr<PriorityGate> gate = nullptr,
                        WorkerPriority priority = WorkerPriority::kNormal);
  // Runs what is still queued, then joins the thread.
  ~StreamWorker();
  StreamWorker(const StreamWorker&) = delete;
  StreamWorker& operator=(const StreamWorker&) = delete;

  const std::string& name() const { return name_; }
  void Enqueue(std::function<void()> task);
  // Blocks until the queue is empty and no task is running.
  void WaitIdle();

 private:
  void Run();
  // Returns once a task is queued or kSpinBeforeSleep has passed.
  void SpinForWork() const;
  bool IdleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && !busy_; }
  bool HasWorkOrStopLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !queue_.empty() || stop_;
  }

  const std::string name_;
  const std::shared_ptr<PriorityGate> gate_;  // null: no priority
  const WorkerPriority priority_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::atomic<size_t> queued_{0};  // queue_.size(), read without mu_ while spinning
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// One execution of RecordEvent: completes (with a timestamp) when the stream
// runs it. Shared by the event and the tasks that wait for it.
class EventRecord {
 public:
  void Complete();
  void Wait();
  bool done();
  std::chrono::steady_clock::time_point time();

 private:
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point time_ ABSL_GUARDED_BY(mu_);
};

// A reusable barrier for a fixed number of parties.
class Rendezvous {
 public:
  explicit Rendezvous(int parties) : parties_(parties) {}
  void ArriveAndWait();

 private:
  const int parties_;
  absl::Mutex mu_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
};

// Launch gates (engine.h, HoldStreams): a hold on ticket t passes once Open(t)
// was called or `max_hold` has passed. Tickets count up; a ring of slots keeps
// the highest ticket opened per slot, so a hold is never released by another
// ticket unless it lags 1024 tickets behind.
class LaunchGate {
 public:
  explicit LaunchGate(int device_count) : timeouts_(device_count, 0) {}
  int64_t NextTicket();
  // Blocks the calling stream thread; counts a timeout against `device`.
  void Hold(int64_t ticket, int device, std::chrono::microseconds max_hold);
  void Open(int64_t ticket);
  int64_t Timeouts(int device);

 private:
  static constexpr int kSlots = 1024;
  bool IsOpen(int64_t ticket) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return opened_[ticket % kSlots] >= ticket;
  }

  absl::Mutex mu_;
  int64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t opened_[kSlots] ABSL_GUARDED_BY(mu_) = {};
  std::vector<int64_t> timeouts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap::engine::host
