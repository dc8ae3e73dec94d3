// NodeSampler: the one sampler of the node's live figures behind
// Node.WatchNode. A thread takes a sample (a v1::NodeSample from `source`)
// every base interval while anyone listens, and hands the same sample to every
// subscriber: N streams cost one sample, not N GetNodeInfo calls.
//
// Bounded by construction: a subscriber holds at most kQueueDepth samples. A
// sample that finds its queue full pushes out the oldest (the reader skips
// it, and the next sample it takes says how many it skipped); a subscriber
// that skipped `drop_after_skips` samples in a row (it took none while they
// came) is dropped: its Next answers RESOURCE_EXHAUSTED and `on_drop` is
// called, so that a stream stuck writing to a reader that never reads is
// cancelled rather than held. Nothing is buffered past that.
//
// Thread safety: every method may be called from any thread. `source` and
// `on_drop` run on the sampler's thread, outside its lock.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "overlap/v1/overlap.pb.h"

namespace overlap::rpc {

struct NodeSamplerOptions {
  // How often the sampler takes a sample while anyone listens; also the
  // shortest interval a subscriber gets (the floor).
  absl::Duration base_interval = absl::Milliseconds(100);
  // A subscriber that skipped this many samples in a row is dropped.
  int drop_after_skips = 100;
};

// What the sampler has done since it started (for tests and logs).
struct NodeSamplerCounters {
  int subscribers = 0;
  int64_t taken = 0;    // samples taken
  int64_t skipped = 0;  // samples pushed out of a full subscriber queue
  int64_t dropped = 0;  // subscribers dropped as too slow
  int max_queued = 0;   // the most samples any subscriber held at once
};

class NodeSampler {
 public:
  static constexpr int kQueueDepth = 2;
  using Source = std::function<v1::NodeSample()>;

  // `source` takes the figures; the sampler sets time_ms and sequence.
  NodeSampler(Source source, NodeSamplerOptions options);
  ~NodeSampler();  // stops the thread; subscriptions must be gone first
  NodeSampler(const NodeSampler&) = delete;
  NodeSampler& operator=(const NodeSampler&) = delete;

  struct Delivered {
    std::shared_ptr<const v1::NodeSample> sample;
    uint64_t skipped = 0;  // samples this subscriber skipped before it
  };

  class Subscription {
   public:
    ~Subscription();  // unsubscribes
    Subscription(const Subscription&) = delete;
    Subscription& operator=(const Subscription&) = delete;

    // The next sample, waiting up to `timeout`; a null sample when none came
    // in time. RESOURCE_EXHAUSTED once this subscriber was dropped.
    absl::StatusOr<Delivered> Next(absl::Duration timeout);
    // The interval granted: the one asked for, at least the base interval.
    absl::Duration interval() const { return interval_; }

   private:
    friend class NodeSampler;
    struct State;
    Subscription(NodeSampler* sampler, std::shared_ptr<State> state, absl::Duration interval)
        : sampler_(sampler), state_(std::move(state)), interval_(interval) {}
    NodeSampler* sampler_;
    std::shared_ptr<State> state_;
    absl::Duration interval_;
  };

  // A subscriber getting a sample every `interval` (raised to the base
  // interval). `on_drop` (may be empty) is called once if it is dropped.
  std::unique_ptr<Subscription> Subscribe(absl::Duration interval, std::function<void()> on_drop);

  // The latest sample, taken now where the last is older than the base
  // interval (or there is none): what a reader outside the streams (the
  // metrics) shares with them.
  std::shared_ptr<const v1::NodeSample> Latest();

  NodeSamplerCounters counters() const;
  absl::Duration base_interval() const { return options_.base_interval; }

 private:
  void Run();
  std::shared_ptr<const v1::NodeSample> Take();
  // Hands `sample` to the subscribers that are due; returns those it dropped,
  // whose on_drop the caller calls outside the lock (their Unsubscribe waits).
  std::vector<std::shared_ptr<Subscription::State>> Publish(
      const std::shared_ptr<const v1::NodeSample>& sample);
  void Unsubscribe(const std::shared_ptr<Subscription::State>& state);

  const Source source_;
  const NodeSamplerOptions options_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::list<std::shared_ptr<Subscription::State>> subscribers_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const v1::NodeSample> latest_ ABSL_GUARDED_BY(mu_);
  uint64_t sequence_ ABSL_GUARDED_BY(mu_) = 0;
  NodeSamplerCounters counters_ ABSL_GUARDED_BY(mu_);
  absl::Mutex take_mu_;  // one sample taken at a time (the thread, or Latest)
  std::thread thread_;
};

}  // namespace overlap::rpc
