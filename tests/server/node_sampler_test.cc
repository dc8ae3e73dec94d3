// The node sampler alone, on a fake source: fan-out of one sample to every
// subscriber, the interval floor, and a reader that never reads: its queue
// stays at two samples, it skips, and it is dropped with RESOURCE_EXHAUSTED.
#include "server/rpc/node_sampler.h"

#include <atomic>

#include "gtest/gtest.h"

namespace overlap::rpc {
namespace {

constexpr absl::Duration kWait = absl::Seconds(10);  // what any one sample may take, at most

NodeSampler::Source CountingSource(std::atomic<int>* calls) {
  return [calls] {
    calls->fetch_add(1);
    v1::NodeSample sample;
    sample.add_devices()->set_index(0);
    return sample;
  };
}

TEST(NodeSamplerTest, SubscribersShareSamplesInOrder) {
  std::atomic<int> calls{0};
  NodeSampler sampler(CountingSource(&calls), {absl::Milliseconds(10), 100});
  auto a = sampler.Subscribe(absl::Milliseconds(10), nullptr);
  auto b = sampler.Subscribe(absl::Milliseconds(10), nullptr);
  uint64_t last_a = 0;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<NodeSampler::Delivered> next = a->Next(kWait);
    ASSERT_TRUE(next.ok()) << next.status();
    ASSERT_NE(next->sample, nullptr);
    EXPECT_GT(next->sample->sequence(), last_a);
    EXPECT_EQ(next->sample->devices_size(), 1);
    last_a = next->sample->sequence();
    absl::StatusOr<NodeSampler::Delivered> other = b->Next(kWait);
    ASSERT_TRUE(other.ok()) << other.status();
    ASSERT_NE(other->sample, nullptr);
  }
  // Two readers, one source call per sample.
  EXPECT_EQ(sampler.counters().subscribers, 2);
  EXPECT_LE(static_cast<int64_t>(calls.load()), sampler.counters().taken);
}

TEST(NodeSamplerTest, IntervalIsFlooredAtTheBaseInterval) {
  std::atomic<int> calls{0};
  NodeSampler sampler(CountingSource(&calls), {absl::Milliseconds(100), 100});
  EXPECT_EQ(sampler.Subscribe(absl::Milliseconds(1), nullptr)->interval(), absl::Milliseconds(100));
  EXPECT_EQ(sampler.Subscribe(absl::ZeroDuration(), nullptr)->interval(), absl::Milliseconds(100));
  EXPECT_EQ(sampler.Subscribe(absl::Milliseconds(250), nullptr)->interval(),
            absl::Milliseconds(250));
}

TEST(NodeSamplerTest, ReaderThatNeverReadsIsBoundedThenDropped) {
  std::atomic<int> calls{0};
  NodeSampler sampler(CountingSource(&calls), {absl::Milliseconds(5), 20});
  std::atomic<int> drops{0};
  auto slow = sampler.Subscribe(absl::Milliseconds(5), [&drops] { drops.fetch_add(1); });
  const absl::Time deadline = absl::Now() + kWait;
  while (sampler.counters().dropped == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const NodeSamplerCounters counters = sampler.counters();
  EXPECT_EQ(counters.dropped, 1);
  EXPECT_EQ(counters.skipped, 20);  // the 20 in a row that dropped it, no more
  EXPECT_EQ(counters.max_queued, NodeSampler::kQueueDepth);
  absl::StatusOr<NodeSampler::Delivered> next = slow->Next(absl::ZeroDuration());
  EXPECT_EQ(next.status().code(), absl::StatusCode::kResourceExhausted);
  slow.reset();  // waits for on_drop to have returned
  EXPECT_EQ(drops.load(), 1);
  EXPECT_EQ(sampler.counters().subscribers, 0);
}

TEST(NodeSamplerTest, SlowReaderSkipsAndIsToldHowMany) {
  std::atomic<int> calls{0};
  NodeSampler sampler(CountingSource(&calls), {absl::Milliseconds(5), 1000});
  auto reader = sampler.Subscribe(absl::Milliseconds(5), nullptr);
  const absl::Time deadline = absl::Now() + kWait;
  while (sampler.counters().skipped < 3 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  absl::StatusOr<NodeSampler::Delivered> next = reader->Next(kWait);
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_NE(next->sample, nullptr);
  EXPECT_GE(next->skipped, 3u);
  EXPECT_EQ(sampler.counters().max_queued, NodeSampler::kQueueDepth);
  EXPECT_EQ(sampler.counters().dropped, 0);
}

TEST(NodeSamplerTest, LatestIsTheSampleTheStreamsGet) {
  std::atomic<int> calls{0};
  NodeSampler sampler(CountingSource(&calls), {absl::Seconds(1), 100});
  auto reader = sampler.Subscribe(absl::Seconds(1), nullptr);
  absl::StatusOr<NodeSampler::Delivered> next = reader->Next(kWait);
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_NE(next->sample, nullptr);
  EXPECT_EQ(sampler.Latest(), next->sample);  // fresh: not taken again
}

}  // namespace
}  // namespace overlap::rpc
