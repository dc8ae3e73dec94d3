#include "server/wire/flight_wire.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace overlap::wire {
namespace {

flight::RankRing Ring() {
  flight::RankRing ring;
  ring.rank = 3;
  ring.comm = "channel 2 ranks [1,3] of a:1/job-000004";
  ring.lane = flight::Lane::kDeferred;
  ring.node = "b:2";
  for (flight::FlightState state :
       {flight::FlightState::kFinished, flight::FlightState::kFailed, flight::FlightState::kAborted,
        flight::FlightState::kEnqueued}) {
    flight::FlightEntry entry;
    entry.seq = ring.entries.size() + 7;
    entry.op = "all_reduce";
    entry.group = {1, 3};
    entry.bytes = 4096;
    entry.dtype = "bf16";
    entry.lane = ring.lane;
    entry.job = "a:1/job-000004";
    entry.job_op = "grads";
    entry.state = state;
    entry.enqueued_ns = 1'000 + entry.seq;
    entry.finished_ns = state == flight::FlightState::kEnqueued ? 0 : 2'000 + entry.seq;
    if (state == flight::FlightState::kFailed || state == flight::FlightState::kAborted) {
      entry.error = absl::StrCat("DEADLINE_EXCEEDED: gloo: timed out at #", entry.seq);
    }
    ring.entries.push_back(entry);
  }
  return ring;
}

void ExpectSame(const flight::RankRing& a, const flight::RankRing& b) {
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.comm, b.comm);
  EXPECT_EQ(a.lane, b.lane);
  EXPECT_EQ(a.node, b.node);
  ASSERT_EQ(a.entries.size(), b.entries.size());
  for (size_t i = 0; i < a.entries.size(); ++i) {
    const flight::FlightEntry &x = a.entries[i], &y = b.entries[i];
    EXPECT_EQ(x.seq, y.seq);
    EXPECT_EQ(x.op, y.op);
    EXPECT_EQ(x.group, y.group);
    EXPECT_EQ(x.bytes, y.bytes);
    EXPECT_EQ(x.dtype, y.dtype);
    EXPECT_EQ(x.lane, y.lane);
    EXPECT_EQ(x.job, y.job);
    EXPECT_EQ(x.job_op, y.job_op);
    EXPECT_EQ(x.state, y.state);
    EXPECT_EQ(x.enqueued_ns, y.enqueued_ns);
    EXPECT_EQ(x.finished_ns, y.finished_ns);
    EXPECT_EQ(x.error, y.error);
  }
}

TEST(FlightWireTest, ARingReadsBackAsItWasSent) { ExpectSame(FromProto(ToProto(Ring())), Ring()); }

TEST(FlightWireTest, APartsRingsReadBackWithTheirTruncation) {
  peer::PartFlight flight{{Ring(), Ring()}, true};
  const peer::PartFlight back = FromProto(ToProto(flight));
  ASSERT_EQ(back.rings.size(), 2u);
  ExpectSame(back.rings[1], Ring());
  EXPECT_TRUE(back.truncated);
  const peer::FlightRequest request{peer::GlobalJobId{"a:1", "job-000004"}};
  EXPECT_EQ(FromProto(ToProto(request)).global_id.Key(), "a:1/job-000004");
}

// Names it does not know read as the critical lane and enqueued.
TEST(FlightWireTest, UnknownNamesReadAsCriticalAndEnqueued) {
  v1::FlightRing ring = ToProto(Ring());
  ring.set_lane("sideways");
  ring.mutable_entries(0)->set_state("exploded");
  const flight::RankRing back = FromProto(ring);
  EXPECT_EQ(back.lane, flight::Lane::kCritical);
  EXPECT_EQ(back.entries[0].state, flight::FlightState::kEnqueued);
}

// A peer's error is cut as this daemon's own are.
TEST(FlightWireTest, APeersLongErrorIsCut) {
  v1::FlightRing ring = ToProto(Ring());
  ASSERT_EQ(ring.entries(2).state(), "aborted");
  ring.mutable_entries(2)->set_error(std::string(10000, 'e'));
  EXPECT_EQ(FromProto(ring).entries[2].error.size(), flight::kMaxFlightErrorBytes);
  EXPECT_EQ(FromProto(ring).entries[2].state, flight::FlightState::kAborted);
}

}  // namespace
}  // namespace overlap::wire
