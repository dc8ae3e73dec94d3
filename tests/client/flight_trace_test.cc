#include "client/format/flight_trace.h"

#include <gtest/gtest.h>

namespace overlap::client {
namespace {

v1::GetFlightResponse TwoRanks() {
  v1::GetFlightResponse flight;
  for (int rank : {0, 1}) {
    v1::FlightRing* ring = flight.add_rings();
    ring->set_rank(rank);
    ring->set_comm("channel 0 ranks [0,1]");
    ring->set_lane("critical");
    v1::FlightEntry* done = ring->add_entries();
    done->set_seq(1);
    done->set_op("all_gather");
    done->set_job_op("fc1");
    done->set_state("finished");
    done->set_enqueued_unix_ns(1'000'000);
    done->set_finished_unix_ns(3'500'000);
    v1::FlightEntry* open = ring->add_entries();
    open->set_seq(2);
    open->set_op("reduce_scatter");
    open->set_job_op("fc2");
    open->set_state("enqueued");
    open->set_enqueued_unix_ns(4'000'000 + rank * 1000);
  }
  return flight;
}

TEST(FlightTraceTest, EachRankGetsAFlightTrackOfItsCollectives) {
  nlohmann::json trace = {{"traceEvents", nlohmann::json::array()}};
  AppendFlightTrace(TwoRanks(), "", trace);
  const nlohmann::json& events = trace["traceEvents"];
  ASSERT_EQ(events.size(), 6u);  // 2 ranks x 2 collectives, and 2 track names
  EXPECT_EQ(events[0]["name"], "#1 all_gather");
  EXPECT_EQ(events[0]["ph"], "X");
  EXPECT_EQ(events[0]["ts"].get<double>(), 0.0);
  EXPECT_EQ(events[0]["dur"].get<double>(), 2500.0);  // µs
  EXPECT_EQ(events[0]["args"]["seq"], 1);
  EXPECT_EQ(events[0]["args"]["lane"], "critical");
  EXPECT_EQ(events[0]["args"]["op"], "fc1");
  EXPECT_EQ(events[1]["name"], "#2 reduce_scatter");
  EXPECT_EQ(events[1]["ph"], "i");  // never finished
  EXPECT_EQ(events[1]["ts"].get<double>(), 3000.0);
  EXPECT_EQ(events[3]["pid"], 1);
  EXPECT_EQ(events[3]["ts"].get<double>(), 3001.0);
  EXPECT_EQ(events[4]["name"], "thread_name");
  EXPECT_EQ(events[4]["args"]["name"], "flight");
  EXPECT_EQ(events[4]["tid"], events[0]["tid"]);
  EXPECT_EQ(FlightEntryCount(TwoRanks()), 4);
}

TEST(FlightTraceTest, AnOpShowsOnlyTheCollectivesThatServedIt) {
  nlohmann::json trace = {{"traceEvents", nlohmann::json::array()}};
  AppendFlightTrace(TwoRanks(), "fc2", trace);
  const nlohmann::json& events = trace["traceEvents"];
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0]["args"]["op"], "fc2");
  EXPECT_EQ(events[0]["ts"].get<double>(), 0.0);  // from the oldest shown
}

}  // namespace
}  // namespace overlap::client
