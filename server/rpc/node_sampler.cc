#include "server/rpc/node_sampler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/rpc/node_rates.h"

namespace overlap::rpc {

// One subscriber's queue; every field is guarded by the sampler's mu_.
struct NodeSampler::Subscription::State {
  absl::Duration interval;
  std::function<void()> on_drop;
  std::deque<std::shared_ptr<const v1::NodeSample>> queue;  // at most kQueueDepth
  absl::Time last_due = absl::InfinitePast();
  uint64_t skipped_unreported = 0;  // since the last sample it took
  int skipped_in_a_row = 0;
  bool dropped = false;
  bool calling_on_drop = false;  // Unsubscribe waits for it: on_drop may touch the caller's call
};

NodeSampler::NodeSampler(Source source, NodeSamplerOptions options)
    : source_(std::move(source)), options_(options) {
  thread_ = std::thread([this] { Run(); });
}

NodeSampler::~NodeSampler() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

std::unique_ptr<NodeSampler::Subscription> NodeSampler::Subscribe(absl::Duration interval,
                                                                  std::function<void()> on_drop) {
  auto state = std::make_shared<Subscription::State>();
  state->interval = std::max(interval, options_.base_interval);
  state->on_drop = std::move(on_drop);
  {
    absl::MutexLock lock(&mu_);
    subscribers_.push_back(state);
    counters_.subscribers = static_cast<int>(subscribers_.size());
  }
  return std::unique_ptr<Subscription>(new Subscription(this, state, state->interval));
}

void NodeSampler::Unsubscribe(const std::shared_ptr<Subscription::State>& state) {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](Subscription::State* s) { return !s->calling_on_drop; }, state.get()));
  subscribers_.remove(state);
  counters_.subscribers = static_cast<int>(subscribers_.size());
}

NodeSampler::Subscription::~Subscription() { sampler_->Unsubscribe(state_); }

absl::StatusOr<NodeSampler::Delivered> NodeSampler::Subscription::Next(absl::Duration timeout) {
  State* s = state_.get();
  absl::MutexLock lock(&sampler_->mu_);
  sampler_->mu_.AwaitWithTimeout(
      absl::Condition(
          +[](State* st) { return st->dropped || !st->queue.empty(); }, s),
      timeout);
  if (s->dropped) {
    return absl::ResourceExhaustedError(
        absl::StrCat("node stream dropped: the reader took no sample while ",
                     sampler_->options_.drop_after_skips, " came (each stream holds at most ",
                     kQueueDepth, "); read the stream as it comes, or ask for a longer interval"));
  }
  if (s->queue.empty()) return Delivered{};
  Delivered delivered{std::move(s->queue.front()), s->skipped_unreported};
  s->queue.pop_front();
  s->skipped_unreported = 0;
  s->skipped_in_a_row = 0;
  return delivered;
}

std::shared_ptr<const v1::NodeSample> NodeSampler::Take() {
  // The source (NVML reads, the job list) runs outside mu_: subscribers'
  // Next and new subscriptions are never held up by it.
  absl::MutexLock take(&take_mu_);
  auto sample = std::make_shared<v1::NodeSample>(source_());
  sample->set_time_ms(absl::ToUnixMillis(absl::Now()));
  std::shared_ptr<const v1::NodeSample> previous;
  {
    absl::MutexLock lock(&mu_);
    previous = latest_;  // take_mu_ held: no other Take changes it meanwhile
  }
  AddDeviceRates(previous.get(), *sample);
  absl::MutexLock lock(&mu_);
  sample->set_sequence(++sequence_);
  ++counters_.taken;
  latest_ = sample;
  return sample;
}

std::shared_ptr<const v1::NodeSample> NodeSampler::Latest() {
  {
    absl::MutexLock lock(&mu_);
    if (latest_ != nullptr &&
        absl::Now() - absl::FromUnixMillis(latest_->time_ms()) < options_.base_interval) {
      return latest_;
    }
  }
  return Take();
}

std::vector<std::shared_ptr<NodeSampler::Subscription::State>> NodeSampler::Publish(
    const std::shared_ptr<const v1::NodeSample>& sample) {
  std::vector<std::shared_ptr<Subscription::State>> drops;
  const absl::Time at = absl::FromUnixMillis(sample->time_ms());
  // Half a base interval of slack: the thread's wake-ups wander a little, and
  // a 200 ms subscriber should get every second sample, not every third.
  const absl::Duration slack = options_.base_interval / 2;
  absl::MutexLock lock(&mu_);
  for (const std::shared_ptr<Subscription::State>& s : subscribers_) {
    if (s->dropped || at - s->last_due < s->interval - slack) continue;
    s->last_due = at;
    if (static_cast<int>(s->queue.size()) >= kQueueDepth) {
      s->queue.pop_front();
      ++s->skipped_unreported;
      ++counters_.skipped;
      if (++s->skipped_in_a_row >= options_.drop_after_skips) {
        s->dropped = true;
        s->queue.clear();
        ++counters_.dropped;
        if (s->on_drop) {
          s->calling_on_drop = true;
          drops.push_back(s);
        }
        continue;
      }
    }
    s->queue.push_back(sample);
    counters_.max_queued = std::max(counters_.max_queued, static_cast<int>(s->queue.size()));
  }
  return drops;
}

void NodeSampler::Run() {
  absl::Time next = absl::Now();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithDeadline(absl::Condition(&stopping_), next);
      if (stopping_) return;
      next += options_.base_interval;
      if (subscribers_.empty()) {
        // Nobody listens: sample nothing, and start afresh when someone does.
        next = absl::Now() + options_.base_interval;
        continue;
      }
    }
    for (const std::shared_ptr<Subscription::State>& dropped : Publish(Take())) {
      dropped->on_drop();
      absl::MutexLock lock(&mu_);
      dropped->calling_on_drop = false;
    }
    const absl::Time now = absl::Now();
    if (next < now) next = now;  // a slow sample does not bunch up the next ones
  }
}

NodeSamplerCounters NodeSampler::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

}  // namespace overlap::rpc
