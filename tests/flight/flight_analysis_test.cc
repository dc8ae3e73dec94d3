#include "server/flight/flight_analysis.h"

#include <gtest/gtest.h>

namespace overlap::flight {
namespace {

FlightEntry Entry(uint64_t seq, const std::string& op, FlightState state, int64_t bytes = 4096) {
  FlightEntry entry;
  entry.seq = seq;
  entry.op = op;
  entry.bytes = bytes;
  entry.dtype = "bf16";
  entry.job = "job-7";
  entry.state = state;
  entry.enqueued_ns = static_cast<int64_t>(seq) * 1000;
  return entry;
}

// Rank `rank` of a four-rank communicator that reached collectives 1..reached,
// all finished but the last `open` ones.
RankRing Ring(int rank, uint64_t reached, int open, const std::string& comm = "channel 0") {
  RankRing ring;
  ring.rank = rank;
  ring.comm = comm;
  for (uint64_t seq = 1; seq <= reached; ++seq) {
    const bool finished = seq + open <= reached;
    ring.entries.push_back(Entry(seq, seq % 2 ? "all_gather" : "reduce_scatter",
                                 finished ? FlightState::kFinished : FlightState::kEnqueued));
  }
  return ring;
}

TEST(FlightAnalysisTest, EveryCollectiveFinished) {
  FlightVerdict verdict = Analyze({Ring(0, 5, 0), Ring(1, 5, 0)});
  EXPECT_EQ(verdict.kind, FlightVerdict::Kind::kAllFinished);
  EXPECT_EQ(verdict.OneLine(), "flight: every recorded collective finished on every rank");
}

TEST(FlightAnalysisTest, NamesTheRankThatNeverReachedACollective) {
  // Ranks 0, 1 and 3 wait in collective 7; rank 2 stopped after 6.
  FlightVerdict verdict = Analyze({Ring(0, 7, 1), Ring(1, 7, 1), Ring(2, 6, 0), Ring(3, 7, 1)});
  ASSERT_EQ(verdict.kind, FlightVerdict::Kind::kNotReached);
  EXPECT_EQ(verdict.seq, 7u);
  EXPECT_EQ(verdict.op, "all_gather");
  EXPECT_EQ(verdict.reached, (std::vector<int>{0, 1, 3}));
  ASSERT_EQ(verdict.missing.size(), 1u);
  EXPECT_EQ(verdict.missing[0].rank, 2);
  ASSERT_TRUE(verdict.missing[0].last.has_value());
  EXPECT_EQ(verdict.missing[0].last->seq, 6u);
  EXPECT_EQ(verdict.OneLine(),
            "flight: collective #7 all_gather (channel 0, critical lane, job job-7) not reached "
            "by rank(s) 2 (last #6 reduce_scatter finished); reached by 0,1,3");
}

TEST(FlightAnalysisTest, EvictedEntriesAreNotMissing) {
  RankRing short_ring = Ring(1, 10, 0);
  short_ring.entries.erase(short_ring.entries.begin(), short_ring.entries.begin() + 6);
  EXPECT_EQ(Analyze({Ring(0, 10, 0), short_ring}).kind, FlightVerdict::Kind::kAllFinished);
}

TEST(FlightAnalysisTest, NamesTheRanksThatDidNotFinishOrFailed) {
  RankRing failed = Ring(1, 4, 0);
  failed.entries[3].state = FlightState::kFailed;
  FlightVerdict verdict = Analyze({Ring(0, 4, 1), failed});
  ASSERT_EQ(verdict.kind, FlightVerdict::Kind::kFailed);
  EXPECT_EQ(verdict.seq, 4u);
  EXPECT_EQ(verdict.failed, (std::vector<int>{1}));
  EXPECT_EQ(verdict.unfinished, (std::vector<int>{0}));
  EXPECT_NE(verdict.OneLine().find("#4 reduce_scatter"), std::string::npos) << verdict.OneLine();
  EXPECT_NE(verdict.OneLine().find("failed on 1, not finished on 0"), std::string::npos)
      << verdict.OneLine();
}

// Collectives enqueued since the last synchronization are not known to be
// done on any rank; a failed one after them is still the one to name.
TEST(FlightAnalysisTest, AFailedCollectiveOutranksEarlierUnfinishedOnes) {
  RankRing a = Ring(0, 6, 3, "channel 0");
  RankRing b = Ring(1, 6, 3, "channel 0");
  RankRing c = Ring(0, 2, 0, "channel 1");
  RankRing d = Ring(1, 2, 0, "channel 1");
  c.entries[1].state = d.entries[1].state = FlightState::kFailed;
  c.entries[1].enqueued_ns = d.entries[1].enqueued_ns = 99000;
  FlightVerdict verdict = Analyze({a, b, c, d});
  ASSERT_EQ(verdict.kind, FlightVerdict::Kind::kFailed);
  EXPECT_EQ(verdict.comm, "channel 1");
  EXPECT_EQ(verdict.seq, 2u);
  EXPECT_EQ(Analyze({a, b}).seq, 4u);  // alone, the first one not yet finished
}

TEST(FlightAnalysisTest, NamesADesync) {
  RankRing other = Ring(1, 5, 1);
  other.entries[2] = Entry(3, "all_reduce", FlightState::kFinished);
  FlightVerdict verdict = Analyze({Ring(0, 5, 1), other});
  ASSERT_EQ(verdict.kind, FlightVerdict::Kind::kDesync);
  EXPECT_EQ(verdict.seq, 3u);
  EXPECT_EQ(verdict.desync, "rank 0 all_gather 4096 B bf16, rank 1 all_reduce 4096 B bf16");
  EXPECT_EQ(verdict.OneLine().rfind("flight: desync at collective #3", 0), 0u) << verdict.OneLine();
}

TEST(FlightAnalysisTest, PicksTheCommunicatorWhoseProblemCameFirst) {
  RankRing late = Ring(0, 9, 1, "channel 1");
  RankRing late_peer = Ring(1, 8, 0, "channel 1");
  FlightVerdict verdict =
      Analyze({late, late_peer, Ring(0, 3, 1, "channel 0"), Ring(1, 2, 0, "channel 0")});
  EXPECT_EQ(verdict.comm, "channel 0");
  EXPECT_EQ(verdict.seq, 3u);
}

// Rings gathered over two nodes name each rank with its node.
TEST(FlightAnalysisTest, NamesTheNodeOfEachRankInGatheredRings) {
  std::vector<RankRing> rings = {Ring(0, 7, 1), Ring(1, 7, 1), Ring(2, 6, 0), Ring(3, 6, 0)};
  for (RankRing& ring : rings) ring.node = ring.rank < 2 ? "a:1" : "b:2";
  EXPECT_EQ(GatheredVerdictLine(rings, {}),
            "flight: collective #7 all_gather (channel 0, critical lane, job job-7) not reached "
            "by rank(s) 2 on node b:2 (last #6 reduce_scatter finished), 3 on node b:2 (last #6 "
            "reduce_scatter finished); reached by 0,1 on node a:1");
}

TEST(FlightAnalysisTest, SaysWhichNodesRingsCouldNotBeRead) {
  std::vector<RankRing> rings = {Ring(0, 5, 0), Ring(1, 5, 0)};
  EXPECT_EQ(GatheredVerdictLine(rings, {UnreadNode{"b:2", "DEADLINE_EXCEEDED: late"}}),
            "flight: rings of node b:2 (DEADLINE_EXCEEDED: late) could not be read; every "
            "recorded collective finished on every rank");
}

// Node b stopped answering: node a's ranks were cut off in collective #5 of
// a communicator with b's ranks (their Synchronize failed, so the entries
// were aborted, not finished). The verdict names #5, where a's ranks were,
// and the ranks of its group whose rings were not read.
TEST(FlightAnalysisTest, NamesWhereTheLiveRanksWereCutOffAndWhomItCouldNotRead) {
  std::vector<RankRing> rings = {Ring(0, 6, 0), Ring(1, 6, 0)};
  for (RankRing& ring : rings) {
    ring.node = "a:1";
    for (FlightEntry& entry : ring.entries) {
      entry.group = {0, 1, 2, 3};
      if (entry.seq >= 5) {
        entry.state = FlightState::kAborted;
        entry.error = "DEADLINE_EXCEEDED: gloo: timed out";
      }
    }
  }
  const FlightVerdict verdict = Analyze(rings);
  ASSERT_EQ(verdict.kind, FlightVerdict::Kind::kAborted);
  EXPECT_EQ(verdict.seq, 5u);
  EXPECT_EQ(verdict.aborted, (std::vector<int>{0, 1}));
  EXPECT_EQ(verdict.unseen, (std::vector<int>{2, 3}));
  EXPECT_EQ(verdict.error, "DEADLINE_EXCEEDED: gloo: timed out");
  EXPECT_EQ(GatheredVerdictLine(rings, {UnreadNode{"b:2", "DEADLINE_EXCEEDED: late"}}),
            "flight: rings of node b:2 (DEADLINE_EXCEEDED: late) could not be read; collective "
            "#5 all_gather (channel 0, critical lane, job job-7) reached by 0,1 on node a:1, "
            "aborted on 0,1 on node a:1; nothing read from rank(s) 2,3");
  // A failed call outranks an aborted collective; an aborted one outranks
  // one not yet known to be done.
  RankRing failed = Ring(0, 2, 0, "channel 1"), failed_peer = Ring(1, 2, 0, "channel 1");
  failed.entries[1].state = failed_peer.entries[1].state = FlightState::kFailed;
  failed.entries[1].enqueued_ns = failed_peer.entries[1].enqueued_ns = 99000;
  std::vector<RankRing> with_failed = rings;
  with_failed.push_back(failed);
  with_failed.push_back(failed_peer);
  EXPECT_EQ(Analyze(with_failed).kind, FlightVerdict::Kind::kFailed);
  std::vector<RankRing> with_open = rings;
  with_open.push_back(Ring(0, 3, 2, "channel 1"));
  with_open.push_back(Ring(1, 3, 2, "channel 1"));
  EXPECT_EQ(Analyze(with_open).comm, "channel 0");
}

// A peer's rings may carry any seq: only the seqs held are judged.
TEST(FlightAnalysisTest, FarApartSeqsCostOnlyTheEntriesHeld) {
  RankRing a = Ring(0, 1, 1), b = Ring(1, 1, 1);
  a.entries.push_back(Entry(uint64_t{1} << 62, "all_gather", FlightState::kFailed));
  const FlightVerdict verdict = Analyze({a, b});
  EXPECT_EQ(verdict.kind, FlightVerdict::Kind::kNotReached);
  EXPECT_EQ(verdict.seq, uint64_t{1} << 62);
}

}  // namespace
}  // namespace overlap::flight
