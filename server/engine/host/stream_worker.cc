#include "server/engine/host/stream_worker.h"

#include <algorithm>
#include <utility>

#include "absl/time/time.h"

namespace overlap::engine::host {

void PriorityGate::HighBegin() {
  absl::MutexLock lock(&mu_);
  ++high_running_;
}

void PriorityGate::HighEnd() {
  absl::MutexLock lock(&mu_);
  --high_running_;
}

void PriorityGate::LowWait(absl::Duration max_yield) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(this, &PriorityGate::NoHighLocked), max_yield);
}

StreamWorker::StreamWorker(std::string name, std::shared_ptr<PriorityGate> gate,
                           WorkerPriority priority)
    : name_(std::move(name)), gate_(std::move(gate)), priority_(priority) {
  thread_ = std::thread([this] { Run(); });
}

StreamWorker::~StreamWorker() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void StreamWorker::Enqueue(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
  queued_.fetch_add(1, std::memory_order_release);
}

void StreamWorker::WaitIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &StreamWorker::IdleLocked));
}

void StreamWorker::SpinForWork() const {
  const auto until = std::chrono::steady_clock::now() + kSpinBeforeSleep;
  while (queued_.load(std::memory_order_acquire) == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::yield();
  }
}

void StreamWorker::Run() {
  while (true) {
    std::function<void()> task;
    SpinForWork();
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &StreamWorker::HasWorkOrStopLocked));
      // Stop only once drained: queued collectives have partners on other
      // streams that would otherwise wait forever.
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_relaxed);
      busy_ = true;
    }
    if (gate_ != nullptr && priority_ == WorkerPriority::kLow) gate_->LowWait(kMaxLowPriorityYield);
    if (gate_ != nullptr && priority_ == WorkerPriority::kHigh) gate_->HighBegin();
    task();
    if (gate_ != nullptr && priority_ == WorkerPriority::kHigh) gate_->HighEnd();
    task = nullptr;  // release what the task holds before reporting idle
    absl::MutexLock lock(&mu_);
    busy_ = false;
  }
}

void EventRecord::Complete() {
  absl::MutexLock lock(&mu_);
  time_ = std::chrono::steady_clock::now();
  done_ = true;
}

void EventRecord::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
}

bool EventRecord::done() {
  absl::MutexLock lock(&mu_);
  return done_;
}

std::chrono::steady_clock::time_point EventRecord::time() {
  absl::MutexLock lock(&mu_);
  return time_;
}

void Rendezvous::ArriveAndWait() {
  absl::MutexLock lock(&mu_);
  const int64_t generation = generation_;
  if (++arrived_ == parties_) {
    arrived_ = 0;
    ++generation_;
    return;
  }
  struct Released {
    const Rendezvous* self;
    int64_t generation;
    bool operator()() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return self->generation_ != generation;
    }
  } released{this, generation};
  mu_.Await(absl::Condition(&released));
}

int64_t LaunchGate::NextTicket() {
  absl::MutexLock lock(&mu_);
  return next_ticket_++;
}

void LaunchGate::Hold(int64_t ticket, int device, std::chrono::microseconds max_hold) {
  absl::MutexLock lock(&mu_);
  struct Opened {
    const LaunchGate* self;
    int64_t ticket;
    bool operator()() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return self->IsOpen(ticket); }
  } opened{this, ticket};
  if (!mu_.AwaitWithTimeout(absl::Condition(&opened), absl::FromChrono(max_hold))) {
    ++timeouts_[device];
  }
}

void LaunchGate::Open(int64_t ticket) {
  absl::MutexLock lock(&mu_);
  int64_t& slot = opened_[ticket % kSlots];
  slot = std::max(slot, ticket);
}

int64_t LaunchGate::Timeouts(int device) {
  absl::MutexLock lock(&mu_);
  return timeouts_[device];
}

}  // namespace overlap::engine::host
