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
  recorder.Failed(call, failed, 5, absl::AbortedError("ncclRemoteError"));
  for (int i = 0; i < 3; ++i) recorder.Enqueued(call, 6);  // wraps rank 0's ring
  recorder.FinishedThrough({0}, 7);
  for (const RankRing& ring : recorder.Snapshot()) {
    ASSERT_EQ(ring.entries.size(), 4u);
    EXPECT_EQ(ring.entries[0].seq, 3u);
    EXPECT_EQ(ring.entries[0].state, FlightState::kFailed);
    EXPECT_EQ(ring.entries[0].error, "ABORTED: ncclRemoteError");
    const FlightState later = ring.rank == 0 ? FlightState::kFinished : FlightState::kEnqueued;
    for (int i = 1; i < 4; ++i) EXPECT_EQ(ring.entries[i].state, later) << ring.rank << " " << i;
  }
}

// The states of one rank's ring, oldest first.
std::vector<FlightState> States(const FlightRecorder& recorder, int rank) {
  std::vector<FlightState> out;
  for (const RankRing& ring : recorder.Snapshot()) {
    if (ring.rank != rank) continue;
    for (const FlightEntry& entry : ring.entries) out.push_back(entry.state);
  }
  return out;
}

// A Synchronize that failed (a timeout, a peer gone) consumed the error: the
// clean one after it must not call the collectives it covered finished.
TEST(FlightRecorderTest, AFailedSynchronizeAbortsWhatItCoveredForGood) {
  FlightRecorder recorder(8);
  const CollectiveCall call = Call("all_reduce", {0, 1});
  recorder.Enqueued(call, 1);
  recorder.FinishedThrough({0, 1}, 2);
  recorder.Enqueued(call, 3);
  recorder.Enqueued(call, 4);
  recorder.SyncFailed({0, 1}, 5, absl::DeadlineExceededError("gloo: timed out"));
  recorder.FinishedThrough({0, 1}, 6);
  recorder.Enqueued(call, 7);
  recorder.FinishedThrough({0, 1}, 8);
  for (const RankRing& ring : recorder.Snapshot()) {
    ASSERT_EQ(ring.entries.size(), 4u);
    EXPECT_EQ(ring.entries[0].state, FlightState::kFinished);
    EXPECT_EQ(ring.entries[0].error, "");
    for (int i : {1, 2}) {
      EXPECT_EQ(ring.entries[i].state, FlightState::kAborted) << i;
      EXPECT_EQ(ring.entries[i].finished_ns, 5) << i;
      EXPECT_EQ(ring.entries[i].error, "DEADLINE_EXCEEDED: gloo: timed out") << i;
    }
    EXPECT_EQ(ring.entries[3].state, FlightState::kFinished);
    EXPECT_EQ(ring.entries[3].finished_ns, 8);
  }
}

// The engine reports a stream's first error: when a Synchronize returns the
// error a call already failed with, the collectives before it ran clean and
// the next clean Synchronize finishes them.
TEST(FlightRecorderTest, ASynchronizeRepeatingAFailedCallsErrorAbortsNothing) {
  FlightRecorder recorder(8);
  const CollectiveCall call = Call("all_gather", {0, 1});
  recorder.Enqueued(call, 1);
  const uint64_t failed = recorder.Enqueued(call, 2);
  const absl::Status error = absl::AbortedError("injected NCCL failure");
  recorder.Failed(call, failed, 3, error);
  recorder.SyncFailed({0, 1}, 4, error);
  EXPECT_EQ(States(recorder, 0),
            (std::vector<FlightState>{FlightState::kEnqueued, FlightState::kFailed}));
  recorder.FinishedThrough({0, 1}, 5);
  EXPECT_EQ(States(recorder, 1),
            (std::vector<FlightState>{FlightState::kFinished, FlightState::kFailed}));
  // Another error at the next Synchronize aborts what came since.
  recorder.Enqueued(call, 6);
  recorder.SyncFailed({0, 1}, 7, error);
  EXPECT_EQ(States(recorder, 0),
            (std::vector<FlightState>{FlightState::kFinished, FlightState::kFailed,
                                      FlightState::kAborted}));
}

// A failed call between enqueued ones hides none of them from the next
// clean Synchronize, however the ring wrapped.
TEST(FlightRecorderTest, ACleanSynchronizeFinishesEntriesOlderThanAFailedOne) {
  FlightRecorder recorder(3);
  const CollectiveCall call = Call("barrier", {0});
  for (int i = 0; i < 4; ++i) recorder.Enqueued(call, i);  // wraps: seqs 2..4 held
  const uint64_t failed = recorder.Enqueued(call, 5);
  recorder.Failed(call, failed, 6, absl::AbortedError("refused"));
  recorder.Enqueued(call, 7);
  recorder.FinishedThrough({0}, 8);
  const std::vector<RankRing> rings = recorder.Snapshot();
  ASSERT_EQ(rings.size(), 1u);
  ASSERT_EQ(rings[0].entries.size(), 3u);
  EXPECT_EQ(rings[0].entries[0].seq, 4u);
  EXPECT_EQ(States(recorder, 0),
            (std::vector<FlightState>{FlightState::kFinished, FlightState::kFailed,
                                      FlightState::kFinished}));
}

// Errors are cut, scopes kept apart, and what they hold is counted.
TEST(FlightRecorderTest, AbortsOnlyItsScopeAndKeepsErrorsShort) {
  FlightRecorder recorder(4);
  CollectiveCall scoped = Call("all_reduce", {0});
  scoped.scope = "a:1/job-1";
  recorder.Enqueued(scoped, 1);
  recorder.Enqueued(Call("all_reduce", {0}), 2);
  const int64_t before = recorder.MemoryBytes();
  recorder.SyncFailed({0}, 3, absl::UnavailableError(std::string(1000, 'x')), "a:1/job-1");
  for (const RankRing& ring : recorder.Snapshot()) {
    ASSERT_EQ(ring.entries.size(), 1u);
    if (ring.comm == FlightRecorder::CommName(0, {0}, "a:1/job-1")) {
      EXPECT_EQ(ring.entries[0].state, FlightState::kAborted);
      EXPECT_EQ(ring.entries[0].error.size(), kMaxFlightErrorBytes);
    } else {
      EXPECT_EQ(ring.entries[0].state, FlightState::kEnqueued) << ring.comm;
    }
  }
  // The error's bytes beyond what an empty string holds already.
  EXPECT_GE(recorder.MemoryBytes() - before,
            static_cast<int64_t>(kMaxFlightErrorBytes - std::string().capacity()));
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
