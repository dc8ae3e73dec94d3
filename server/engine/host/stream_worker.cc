#include "server/engine/host/stream_worker.h"

#include <utility>

namespace overlap::engine::host {

StreamWorker::StreamWorker(std::string name) : name_(std::move(name)) {
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
}

void StreamWorker::WaitIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](StreamWorker* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
        return self->queue_.empty() && !self->busy_;
      },
      this));
}

void StreamWorker::Run() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](StreamWorker* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return !self->queue_.empty() || self->stop_;
          },
          this));
      // Stop only once drained: queued collectives have partners on other
      // streams that would otherwise wait forever.
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    task();
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
  struct Args {
    Rendezvous* self;
    int64_t generation;
  } args{this, generation};
  mu_.Await(absl::Condition(
      +[](Args* a) ABSL_NO_THREAD_SAFETY_ANALYSIS { return a->self->generation_ != a->generation; },
      &args));
}

}  // namespace overlap::engine::host
