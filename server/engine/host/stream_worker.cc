#include "server/engine/host/stream_worker.h"

#include <algorithm>
#include <utility>

namespace overlap::engine::host {

StreamWorker::StreamWorker(std::string name) : name_(std::move(name)) {
  thread_ = std::thread([this] { Run(); });
}

StreamWorker::~StreamWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void StreamWorker::Enqueue(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  changed_.notify_all();
}

void StreamWorker::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [this] { return queue_.empty() && !busy_; });
}

void StreamWorker::Run() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait(lock, [this] { return !queue_.empty() || stop_; });
      // Stop only once drained: queued collectives have partners on other
      // streams that would otherwise wait forever.
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    task();
    task = nullptr;  // release what the task holds before reporting idle
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
    }
    changed_.notify_all();
  }
}

void EventRecord::Complete() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    time_ = std::chrono::steady_clock::now();
    done_ = true;
  }
  completed_.notify_all();
}

void EventRecord::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  completed_.wait(lock, [this] { return done_; });
}

bool EventRecord::done() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

std::chrono::steady_clock::time_point EventRecord::time() {
  std::lock_guard<std::mutex> lock(mu_);
  return time_;
}

void Rendezvous::ArriveAndWait() {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t generation = generation_;
  if (++arrived_ == parties_) {
    arrived_ = 0;
    ++generation_;
    lock.unlock();
    released_.notify_all();
    return;
  }
  released_.wait(lock, [&] { return generation_ != generation; });
}

int64_t LaunchGate::NextTicket() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_ticket_++;
}

void LaunchGate::Hold(int64_t ticket, int device, std::chrono::microseconds max_hold) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!opened_cv_.wait_for(lock, max_hold, [&] { return IsOpen(ticket); })) {
    ++timeouts_[device];
  }
}

void LaunchGate::Open(int64_t ticket) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t& slot = opened_[ticket % kSlots];
    slot = std::max(slot, ticket);
  }
  opened_cv_.notify_all();
}

int64_t LaunchGate::Timeouts(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  return timeouts_[device];
}

}  // namespace overlap::engine::host
