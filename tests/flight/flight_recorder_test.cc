#include "server/flight/flight_recorder.h"

#include <gtest/gtest.h>

namespace overlap::flight {
namespace {

CollectiveCall Call(const std::string& op, std::vector<int> group, int channel = 0) {
  CollectiveCall call;
  call.op = op;
  call.channel = channel;
  call.group = std::move(group);
  call.bytes_by_rank.assign(call.group.size(), 4096);
  call.dtype = "bf16";
  call.job = "job-1";
  return call;
}

TEST(FlightRecorderTest, NumbersEachCommunicatorsCollectivesFromOneOnEveryRank) {
  FlightRecorder recorder(10);
  EXPECT_EQ(recorder.Enqueued(Call("all_gather", {0, 1}), 100), 1u);
  EXPECT_EQ(recorder.Enqueued(Call("all_reduce", {0, 1}), 200), 2u);
  EXPECT_EQ(recorder.Enqueued(Call("all_reduce", {0, 1}, 1), 300), 1u);
  std::vector<RankRing> rings = recorder.Snapshot();
  ASSERT_EQ(rings.size(), 4u);  // two communicators x two ranks
  for (const RankRing& ring : rings) {
    if (ring.comm != FlightRecorder::CommName(0, {0, 1})) continue;
    ASSERT_EQ(ring.entries.size(), 2u);
    EXPECT_EQ(ring.entries[0].seq, 1u);
    EXPECT_EQ(ring.entries[0].op, "all_gather");
    EXPECT_EQ(ring.entries[1].seq, 2u);
    EXPECT_EQ(ring.entries[1].state, FlightState::kEnqueued);
    EXPECT_EQ(ring.entries[1].job, "job-1");
  }
}

TEST(FlightRecorderTest, KeepsTheNewestEntriesInSeqOrderOnceItWraps) {
  FlightRecorder recorder(3);
  for (int i = 0; i < 7; ++i) recorder.Enqueued(Call("all_reduce", {0}), i);
  std::vector<RankRing> rings = recorder.Snapshot();
  ASSERT_EQ(rings.size(), 1u);
  ASSERT_EQ(rings[0].entries.size(), 3u);
  EXPECT_EQ(rings[0].entries[0].seq, 5u);
  EXPECT_EQ(rings[0].entries[1].seq, 6u);
  EXPECT_EQ(rings[0].entries[2].seq, 7u);
  const int64_t bytes = recorder.MemoryBytes();
  for (int i = 0; i < 100; ++i) recorder.Enqueued(Call("all_reduce", {0}), i);
  EXPECT_EQ(recorder.MemoryBytes(), bytes);  // bounded: wrapping allocates nothing more
}

TEST(FlightRecorderTest, SettlesEntriesBySynchronizeAndFailure) {
  FlightRecorder recorder(4);
  const CollectiveCall call = Call("all_gather", {0, 1});
  recorder.Enqueued(call, 1);
  recorder.Enqueued(call, 2);
  recorder.FinishedThrough({0}, 3);
  const uint64_t failed = recorder.Enqueued(call, 4);
  recorder.Failed(call, failed, 5);
  for (int i = 0; i < 3; ++i) recorder.Enqueued(call, 6);  // wraps rank 0's ring
  recorder.FinishedThrough({0}, 7);
  for (const RankRing& ring : recorder.Snapshot()) {
    ASSERT_EQ(ring.entries.size(), 4u);
    EXPECT_EQ(ring.entries[0].seq, 3u);
    EXPECT_EQ(ring.entries[0].state, FlightState::kFailed);
    const FlightState later = ring.rank == 0 ? FlightState::kFinished : FlightState::kEnqueued;
    for (int i = 1; i < 4; ++i) EXPECT_EQ(ring.entries[i].state, later) << ring.rank << " " << i;
  }
}

TEST(FlightRecorderTest, SnapshotOfAJobHoldsOnlyRingsWithItsEntries) {
  FlightRecorder recorder(4);
  recorder.Enqueued(Call("all_gather", {0, 1}), 1);
  CollectiveCall other = Call("all_gather", {2, 3});
  other.job = "job-2";
  recorder.Enqueued(other, 2);
  std::vector<RankRing> rings = recorder.Snapshot("job-2");
  ASSERT_EQ(rings.size(), 2u);
  EXPECT_EQ(rings[0].rank, 2);
  EXPECT_EQ(rings[1].rank, 3);
}

}  // namespace
}  // namespace overlap::flight
