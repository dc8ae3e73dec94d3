// The dispatcher's decisions on a hand-driven clock: ready by event, yield
// while critical work is pending, forced issue near the deadline, and
// one order whatever the timing.
#include "server/runner/deferred_dispatcher.h"

#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace overlap::runner {
namespace {

std::vector<DeferredWork> TwoGradients() {
  return {DeferredWork{"w1_ar", 3, {0, 1}, 1.0}, DeferredWork{"w2_ar", 2, {2, 3}, 1.0}};
}

auto None() {
  return [](int) { return false; };
}

TEST(DeferredDispatcherTest, NothingGoesBeforeItsInputIsReady) {
  DeferredDispatcher d(TwoGradients(), 50);
  DispatchDecision next = d.Next(0, None());
  EXPECT_EQ(next.work, -1);
  EXPECT_EQ(next.wait, DispatchWait::kNotReady);
  d.Ready(0, 2.5);
  next = d.Next(3, None());
  EXPECT_EQ(next.work, 0);
  EXPECT_FALSE(next.forced);
  d.Issued(next, 3);
  EXPECT_EQ(d.records()[0].ready_ms, 2.5);
  EXPECT_EQ(d.records()[0].first_issued_ms, 3);
}

TEST(DeferredDispatcherTest, ALaterCollectiveNeverOvertakesAnEarlierOne) {
  DeferredDispatcher d(TwoGradients(), 50);
  d.Ready(1, 0);  // the second is ready first
  EXPECT_EQ(d.Next(1, None()).wait, DispatchWait::kNotReady);
  d.Ready(0, 2);
  std::vector<int> issued;
  for (double t = 2; !d.AllIssued(); t += 1) {
    const DispatchDecision next = d.Next(t, None());
    ASSERT_GE(next.work, 0);
    issued.push_back(next.work);
    d.Issued(next, t);
  }
  EXPECT_EQ(issued, (std::vector<int>{0, 0, 0, 1, 1}));
  EXPECT_EQ(d.Next(10, None()).wait, DispatchWait::kDone);
}

TEST(DeferredDispatcherTest, YieldsWhileCriticalWorkIsPendingOnItsDevices) {
  DeferredDispatcher d(TwoGradients(), 50);
  d.Ready(0, 0);
  std::set<int> busy = {1};
  auto pending = [&](int device) { return busy.count(device) > 0; };
  for (double t = 0; t < 10; t += 1) {
    const DispatchDecision next = d.Next(t, pending);
    EXPECT_EQ(next.work, -1);
    EXPECT_EQ(next.wait, DispatchWait::kCritical);
  }
  // Asked ten times, one chunk waited: one yield.
  EXPECT_EQ(d.records()[0].yielded, 1);
  busy = {2};  // critical work elsewhere does not hold it
  const DispatchDecision next = d.Next(10, pending);
  EXPECT_EQ(next.work, 0);
  EXPECT_FALSE(next.forced);
  EXPECT_FALSE(next.deadline_near);
  d.Issued(next, 10);
  EXPECT_EQ(d.records()[0].forced, 0);
}

TEST(DeferredDispatcherTest, ANearDeadlineForcesTheChunk) {
  DeferredDispatcher d({DeferredWork{"g", 2, {0}, 4.0}}, 20);
  d.Ready(0, 5);  // deadline 25; a chunk takes 4
  auto always = [](int) { return true; };
  EXPECT_EQ(d.Next(20, always).wait, DispatchWait::kCritical);
  const DispatchDecision at_21 = d.Next(21, always);
  EXPECT_EQ(at_21.work, 0);
  EXPECT_TRUE(at_21.forced);
  EXPECT_TRUE(at_21.deadline_near);
  d.Issued(at_21, 21);
  // The second chunk's deadline is the collective's: already near, so it goes too.
  const DispatchDecision at_22 = d.Next(22, always);
  EXPECT_TRUE(at_22.forced);
  d.Issued(at_22, 22);
  EXPECT_TRUE(d.AllIssued());
  EXPECT_EQ(d.records()[0].forced, 2);
  EXPECT_EQ(d.records()[0].yielded, 1);
}

// Two ranks' dispatchers fed different timings (one rank sees its inputs late
// and critical work longer) issue the same sequence of chunks.
TEST(DeferredDispatcherTest, TheOrderIsTheSameWhateverTheTiming) {
  auto run = [](double ready_lag, double critical_until) {
    std::vector<DeferredWork> work = {DeferredWork{"a", 2, {0}, 0.5}, DeferredWork{"b", 1, {0}, 0.5},
                                      DeferredWork{"c", 3, {0}, 0.5}};
    DeferredDispatcher d(work, 8);
    std::vector<int> order;
    for (double t = 0; !d.AllIssued() && t < 100; t += 0.25) {
      for (int w = 0; w < 3; ++w) {
        if (t >= ready_lag * (3 - w)) d.Ready(w, t);  // later work is ready first
      }
      const DispatchDecision next = d.Next(t, [&](int) { return t < critical_until; });
      if (next.work >= 0) {
        order.push_back(next.work);
        d.Issued(next, t);
      }
    }
    return order;
  };
  const std::vector<int> expected = {0, 0, 1, 2, 2, 2};
  EXPECT_EQ(run(0, 0), expected);
  EXPECT_EQ(run(1.5, 3), expected);
  EXPECT_EQ(run(0.1, 40), expected);  // the bound forces it through
}

TEST(DeferredDispatcherTest, IssuedIgnoresADecisionThatIsNotTheHead) {
  DeferredDispatcher d(TwoGradients(), 50);
  d.Ready(0, 0);
  DispatchDecision not_head;
  not_head.work = 1;
  d.Issued(not_head, 0);
  EXPECT_EQ(d.records()[1].issued, 0);
  EXPECT_EQ(d.Head(), 0);
  EXPECT_EQ(d.HeadDeadlineMs(), 50);
}

}  // namespace
}  // namespace overlap::runner
