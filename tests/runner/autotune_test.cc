#include "server/runner/autotune.h"

#include <gtest/gtest.h>

namespace overlap::runner {
namespace {

using ops::Schedule;

const Schedule kSerial{OverlapMode::kSerial, 1, Transport::kNccl};
const Schedule kBulk{OverlapMode::kBulk, 1, Transport::kP2p};
const Schedule kRing1{OverlapMode::kRing, 1, Transport::kP2p};
const Schedule kRing2{OverlapMode::kRing, 2, Transport::kP2p};

TEST(AutotuneTest, StageOneKeepsEachCandidatesBestMedian) {
  Autotune tally({kSerial, kRing1});
  tally.AddRound(0, {2.0, 2.0, 9.0});
  tally.AddRound(1, {1.5, 1.0, 1.0});
  tally.AddRound(1, {3.0, 3.0, 3.0});  // a slower second round does not count against it
  const AutotuneChoice choice = tally.Decide(true);
  EXPECT_EQ(choice.schedule, kRing1);
  EXPECT_DOUBLE_EQ(choice.ms, 1.0);
  EXPECT_TRUE(tally.RunoffEntrants(true).empty()) << "2.0 is not within 6% of 1.0";
}

TEST(AutotuneTest, LeadersAreTheCloseOnesBestFirstAtMostThree) {
  Autotune tally(
      {kSerial, kBulk, kRing1, kRing2, Schedule{OverlapMode::kRing, 4, Transport::kP2p}});
  tally.AddRound(0, {2.00});
  tally.AddRound(1, {1.05});
  tally.AddRound(2, {1.00});
  tally.AddRound(3, {1.02});
  tally.AddRound(4, {1.04});
  EXPECT_EQ(tally.RunoffEntrants(false), (std::vector<size_t>{2, 3, 4}));
  // Serial joins them where it is the fallback.
  EXPECT_EQ(tally.RunoffEntrants(true), (std::vector<size_t>{2, 3, 4, 0}));
}

TEST(AutotuneTest, TheRunoffDecidesAmongItsEntrantsOnly) {
  // ring/1 led stage one by a hair on a lucky round; pooled over the runoff,
  // ring/2 is faster. bulk, never in the runoff, does not win on its stage-one
  // figure even though the runoff's medians came out higher.
  Autotune tally({kSerial, kBulk, kRing1, kRing2});
  tally.AddRound(0, {3.0});
  tally.AddRound(1, {1.20});
  tally.AddRound(2, {1.00});
  tally.AddRound(3, {1.01});
  ASSERT_EQ(tally.RunoffEntrants(false), (std::vector<size_t>{2, 3}));
  tally.AddRunoff(2, {1.30, 1.31, 1.29});
  tally.AddRunoff(3, {1.26, 1.25});
  tally.AddRunoff(2, {1.28, 1.32});
  tally.AddRunoff(3, {1.24, 1.27, 1.25});
  const AutotuneChoice choice = tally.Decide(true);
  EXPECT_EQ(choice.schedule, kRing2);
  EXPECT_DOUBLE_EQ(choice.ms, 1.25);
  EXPECT_NE(choice.reason.find("runoff ring/2/p2p 1.250 / ring/p2p 1.300"), std::string::npos)
      << choice.reason;
}

// algorithm: auto. A pinned layout 0.4% ahead of the transports' own gives way
// to the fastest of those; one 10% ahead wins.
TEST(AutotuneTest, APinnedAllReduceLayoutMustBeatTheTransportsOwnByTheMargin) {
  const Schedule nccl{OverlapMode::kSerial, 1, Transport::kNccl};
  const Schedule p2p{OverlapMode::kSerial, 1, Transport::kP2p};
  const Schedule nccl_ring{OverlapMode::kSerial, 1, Transport::kNccl, AllReduceAlgorithm::kRing};
  const Schedule p2p_tree{OverlapMode::kSerial, 1, Transport::kP2p, AllReduceAlgorithm::kTree};
  Autotune close({nccl, nccl_ring, p2p, p2p_tree});
  close.AddRound(0, {1.000});
  close.AddRound(1, {0.996});
  close.AddRound(2, {0.998});
  close.AddRound(3, {1.500});
  AutotuneChoice choice = close.Decide(true);
  EXPECT_EQ(choice.schedule, p2p);
  EXPECT_NE(choice.reason.find("a pinned layout does not pay: best serial/nccl/ring 0.996 ms vs "
                               "serial/p2p 0.998 ms"),
            std::string::npos)
      << choice.reason;
  EXPECT_EQ(close.Decide(false).schedule, nccl_ring) << "without the fallback, the fastest";

  Autotune clear({nccl, nccl_ring, p2p, p2p_tree});
  clear.AddRound(0, {1.00});
  clear.AddRound(1, {1.20});
  clear.AddRound(2, {1.10});
  clear.AddRound(3, {0.90});
  EXPECT_EQ(clear.Decide(true).schedule, p2p_tree);
}

TEST(AutotuneTest, OverlapThatDoesNotBeatSerialByTheMarginGivesWay) {
  Autotune tally({kSerial, kRing1});
  tally.AddRound(0, {1.00});
  tally.AddRound(1, {0.99});  // 1% better: under the 2% margin
  tally.AddRunoff(0, {1.00});
  tally.AddRunoff(1, {0.99});
  AutotuneChoice choice = tally.Decide(/*fall_back_to_serial=*/true);
  EXPECT_EQ(choice.schedule, kSerial);
  EXPECT_DOUBLE_EQ(choice.ms, 1.00);
  EXPECT_NE(choice.reason.find("overlap does not pay"), std::string::npos) << choice.reason;
  // An explicit mode that tunes only its transport or chunks takes the fastest.
  choice = tally.Decide(/*fall_back_to_serial=*/false);
  EXPECT_EQ(choice.schedule, kRing1);
}

TEST(AutotuneTest, SerialIsJudgedByItsRunoffMedianLikeTheLeaders) {
  // Stage one at a high clock, the runoff at a lower one: every runoff figure is
  // ~12% above stage one. Against serial's stage-one 3.20 ms, ring/2's 3.25 ms
  // would not pay; against serial's own runoff 3.60 ms it wins by 10%.
  const Schedule kRing4{OverlapMode::kRing, 4, Transport::kP2p};
  Autotune tally({kSerial, kRing2, kRing4});
  tally.AddRound(0, {3.20});
  tally.AddRound(1, {2.90});
  tally.AddRound(2, {2.92});
  ASSERT_EQ(tally.RunoffEntrants(true), (std::vector<size_t>{1, 2, 0}));
  tally.AddRunoff(0, {3.60, 3.61, 3.59});
  tally.AddRunoff(1, {3.25, 3.26, 3.24});
  tally.AddRunoff(2, {3.27, 3.28, 3.29});
  const AutotuneChoice choice = tally.Decide(true);
  EXPECT_EQ(choice.schedule, kRing2) << choice.reason;
  EXPECT_NE(choice.reason.find("(serial 3.600 ms)"), std::string::npos) << choice.reason;
}

TEST(AutotuneTest, NoSamplesNoLeaders) {
  Autotune tally({kSerial, kRing1});
  EXPECT_TRUE(tally.RunoffEntrants(true).empty());
}

}  // namespace
}  // namespace overlap::runner
