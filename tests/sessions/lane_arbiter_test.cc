// The arbiter's decisions on a hand-driven clock: a deferred chunk yields to
// critical work on its devices, goes forced near its deadline, keeps its
// session's order, fills a device's lane no deeper than allowed, and no
// deferred session starves another.
#include "server/sessions/lane_arbiter.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>

namespace overlap::sessions {
namespace {

// A command of `session` with one op of `chunks` chunks (each `chunk_ms`) over `devices`.
DeferredCommand Command(uint64_t session, uint64_t seq, int chunks, std::vector<int> devices,
                        double ready_ms, double bound_ms, double chunk_ms = 1.0) {
  DeferredCommand c;
  c.session = session;
  c.seq = seq;
  c.ops.push_back(runner::DeferredWork{"grads", chunks, std::move(devices), chunk_ms});
  c.ready_ms = ready_ms;
  c.bound_ms = bound_ms;
  return c;
}

struct Devices {
  std::set<int> critical;
  std::set<int> full;
  LaneView View() {
    return LaneView{[this](int d) { return critical.count(d) > 0; },
                    [this](int d) { return full.count(d) > 0; }};
  }
};

TEST(LaneArbiterTest, AChunkGoesWhenNoCriticalWorkIsPending) {
  LaneArbiter arbiter;
  Devices devices;
  arbiter.Add(Command(1, 7, 2, {0, 1}, 0, 50));
  std::optional<LaneGrant> grant = arbiter.Next(1, devices.View());
  ASSERT_TRUE(grant.has_value());
  EXPECT_EQ(grant->session, 1u);
  EXPECT_EQ(grant->seq, 7u);
  EXPECT_EQ(grant->chunk, 0);
  EXPECT_FALSE(grant->last);
  EXPECT_FALSE(grant->forced);
  EXPECT_EQ(grant->waited_ms, 0);
  arbiter.Issued(*grant, 1);
  grant = arbiter.Next(2, devices.View());
  ASSERT_TRUE(grant.has_value());
  EXPECT_EQ(grant->chunk, 1);
  EXPECT_TRUE(grant->last);
  arbiter.Issued(*grant, 2);
  EXPECT_TRUE(arbiter.Empty());
  EXPECT_FALSE(arbiter.Next(3, devices.View()).has_value());
}

TEST(LaneArbiterTest, YieldsToCriticalWorkOnItsDevicesAndCountsTheWait) {
  LaneArbiter arbiter;
  Devices devices;
  devices.critical = {1};
  arbiter.Add(Command(1, 1, 2, {0, 1}, 0, 100));
  for (double t = 0; t < 10; t += 1) EXPECT_FALSE(arbiter.Next(t, devices.View()).has_value());
  EXPECT_EQ(arbiter.yielded(), 1);  // one chunk waited, however often it was asked
  devices.critical = {2};           // critical work elsewhere does not hold it
  const std::optional<LaneGrant> grant = arbiter.Next(12, devices.View());
  ASSERT_TRUE(grant.has_value());
  EXPECT_FALSE(grant->forced);
  EXPECT_DOUBLE_EQ(grant->waited_ms, 12);
  arbiter.Issued(*grant, 12);
  const std::optional<LaneGrant> next = arbiter.Next(13, devices.View());
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->waited_ms, 0);  // the wait was the first chunk's
}

TEST(LaneArbiterTest, ANearDeadlineForcesTheChunkEvenOnAFullLane) {
  LaneArbiter arbiter;
  Devices devices;
  devices.critical = {0};
  arbiter.Add(Command(1, 1, 3, {0}, 5, 20, 4.0));  // deadline 25, a chunk takes 4
  EXPECT_FALSE(arbiter.Next(20, devices.View()).has_value());
  devices.full = {0};
  std::optional<LaneGrant> grant = arbiter.Next(21, devices.View());
  ASSERT_TRUE(grant.has_value());
  EXPECT_TRUE(grant->forced);
  EXPECT_DOUBLE_EQ(grant->waited_ms, 1);
  arbiter.Issued(*grant, 21);
  // The deadline is the command's: every later chunk is past it too.
  grant = arbiter.Next(22, devices.View());
  ASSERT_TRUE(grant.has_value());
  EXPECT_TRUE(grant->forced);
  EXPECT_EQ(grant->chunk, 1);
}

TEST(LaneArbiterTest, AFullLaneHoldsChunksThatAreNotDue) {
  LaneArbiter arbiter;
  Devices devices;
  devices.full = {1};
  arbiter.Add(Command(1, 1, 2, {0, 1}, 0, 100));
  EXPECT_FALSE(arbiter.Next(1, devices.View()).has_value());
  EXPECT_EQ(arbiter.yielded(), 0);  // no critical work: not a yield
  devices.full.clear();
  EXPECT_TRUE(arbiter.Next(2, devices.View()).has_value());
}

TEST(LaneArbiterTest, AChunkThatGoesOnlyForItsBoundIsCountedAtBound) {
  LaneArbiter arbiter;
  Devices devices;
  arbiter.Add(Command(1, 1, 3, {0}, 0, 10, 2.0));  // deadline 10, a chunk takes 2
  std::optional<LaneGrant> grant = arbiter.Next(1, devices.View());
  ASSERT_TRUE(grant.has_value());
  EXPECT_FALSE(grant->at_bound);  // a free lane, nothing critical: it goes free
  arbiter.Issued(*grant, 1);
  devices.full = {0};
  EXPECT_FALSE(arbiter.Next(2, devices.View()).has_value());  // not due: held by the full lane
  grant = arbiter.Next(8, devices.View());                    // 8 + 2 reaches the deadline
  ASSERT_TRUE(grant.has_value());
  EXPECT_FALSE(grant->forced);   // no critical work to go past
  EXPECT_TRUE(grant->at_bound);  // but only its bound sent it onto the full lane
  arbiter.Issued(*grant, 8);
  devices.full.clear();
  devices.critical = {0};
  grant = arbiter.Next(9, devices.View());
  ASSERT_TRUE(grant.has_value());
  EXPECT_TRUE(grant->forced);
  EXPECT_TRUE(grant->at_bound);
}

TEST(LaneArbiterTest, ASessionsCommandsGoInOrder) {
  LaneArbiter arbiter;
  Devices devices;
  arbiter.Add(Command(1, 1, 2, {0}, 0, 100));
  arbiter.Add(Command(1, 2, 1, {0}, 0, 1));  // due sooner, still after command 1
  std::vector<std::pair<uint64_t, int>> order;
  for (double t = 0; !arbiter.Empty(); t += 1) {
    const std::optional<LaneGrant> grant = arbiter.Next(t, devices.View());
    ASSERT_TRUE(grant.has_value());
    order.emplace_back(grant->seq, grant->chunk);
    arbiter.Issued(*grant, t);
  }
  EXPECT_EQ(order, (std::vector<std::pair<uint64_t, int>>{{1, 0}, {1, 1}, {2, 0}}));
}

TEST(LaneArbiterTest, AnOpsChunksGoBeforeTheNextOpsOfALayerCommand) {
  LaneArbiter arbiter;
  Devices devices;
  DeferredCommand layer = Command(1, 1, 2, {0}, 0, 100);
  layer.ops.push_back(runner::DeferredWork{"second", 1, {0}, 1.0});
  arbiter.Add(std::move(layer));
  std::vector<std::pair<int, int>> order;
  bool last = false;
  for (double t = 0; !arbiter.Empty(); t += 1) {
    const std::optional<LaneGrant> grant = arbiter.Next(t, devices.View());
    ASSERT_TRUE(grant.has_value());
    order.emplace_back(grant->op, grant->chunk);
    last = grant->last;
    arbiter.Issued(*grant, t);
  }
  EXPECT_EQ(order, (std::vector<std::pair<int, int>>{{0, 0}, {0, 1}, {1, 0}}));
  EXPECT_TRUE(last);
}

TEST(LaneArbiterTest, TheEarliestDeadlineGoesFirstAndNoSessionStarves) {
  LaneArbiter arbiter;
  Devices devices;
  arbiter.Add(Command(1, 1, 4, {0, 1}, 0, 100));  // deadline 100
  arbiter.Add(Command(2, 1, 4, {0, 1}, 10, 30));  // deadline 40: goes first
  std::vector<uint64_t> sessions;
  for (double t = 10; !arbiter.Empty(); t += 1) {
    const std::optional<LaneGrant> grant = arbiter.Next(t, devices.View());
    ASSERT_TRUE(grant.has_value());
    sessions.push_back(grant->session);
    arbiter.Issued(*grant, t);
  }
  EXPECT_EQ(sessions, (std::vector<uint64_t>{2, 2, 2, 2, 1, 1, 1, 1}));
}

TEST(LaneArbiterTest, SteadyCriticalWorkCannotStarveAChunkPastItsBound) {
  LaneArbiter arbiter;
  Devices devices;
  devices.critical = {0, 1};  // never ends
  arbiter.Add(Command(1, 1, 3, {0, 1}, 0, 10, 0.5));
  int issued = 0;
  double first = -1;
  for (double t = 0; t < 100 && !arbiter.Empty(); t += 0.25) {
    while (const std::optional<LaneGrant> grant = arbiter.Next(t, devices.View())) {
      EXPECT_TRUE(grant->forced);
      if (first < 0) first = t;
      arbiter.Issued(*grant, t);
      ++issued;
    }
  }
  EXPECT_EQ(issued, 3);
  EXPECT_GE(first, 9.5);  // not before its deadline is near
  EXPECT_LE(first, 10);
}

// A client that posts ahead: commands 2 and 3 were ready at 0, behind command
// 1. Each one's bound runs from when it heads the queue, so under steady
// critical work one goes per bound, not all at once on the first deadline.
TEST(LaneArbiterTest, ACommandsBoundRunsFromWhenItHeadsItsSessionsQueue) {
  LaneArbiter arbiter;
  Devices devices;
  devices.critical = {0};  // never ends
  for (uint64_t seq = 1; seq <= 3; ++seq) arbiter.Add(Command(1, seq, 1, {0}, 0, 10, 0.5));
  std::vector<double> issued_at;
  for (double t = 0; t < 100 && !arbiter.Empty(); t += 0.25) {
    while (const std::optional<LaneGrant> grant = arbiter.Next(t, devices.View())) {
      EXPECT_TRUE(grant->forced);
      // Runnable from when it headed the queue: its whole bound but the chunk ago.
      EXPECT_DOUBLE_EQ(grant->runnable_age_ms, 9.5);
      issued_at.push_back(t);
      arbiter.Issued(*grant, t);
    }
  }
  ASSERT_EQ(issued_at.size(), 3u);
  EXPECT_DOUBLE_EQ(issued_at[0], 9.5);   // ready 0, deadline 10, a chunk of 0.5
  EXPECT_DOUBLE_EQ(issued_at[1], 19.0);  // headed the queue at 9.5
  EXPECT_DOUBLE_EQ(issued_at[2], 28.5);
}

TEST(LaneArbiterTest, ARemovedSessionsChunksNeverGo) {
  LaneArbiter arbiter;
  Devices devices;
  arbiter.Add(Command(1, 1, 2, {0}, 0, 100));
  arbiter.Add(Command(2, 1, 1, {0}, 0, 200));
  arbiter.Remove(1);
  const std::optional<LaneGrant> grant = arbiter.Next(1, devices.View());
  ASSERT_TRUE(grant.has_value());
  EXPECT_EQ(grant->session, 2u);
  arbiter.Issued(*grant, 1);
  EXPECT_TRUE(arbiter.Empty());
}

}  // namespace
}  // namespace overlap::sessions
