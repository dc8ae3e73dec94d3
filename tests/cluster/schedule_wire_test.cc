// The coordinator's decisions as a part request carries them.
#include "server/cluster/schedule_wire.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace overlap::cluster {
namespace {

using ::testing::HasSubstr;

TEST(ScheduleWireTest, DecisionsComeBackAsTheyWereSent) {
  const ops::DecidedSchedules sent = {
      {"fc1", ops::Schedule{OverlapMode::kChunked, 4, Transport::kNccl}},
      {"wgrad", ops::Schedule{OverlapMode::kSerial, 1, Transport::kNone}},
      {"grads", ops::Schedule{OverlapMode::kSerial, 1, Transport::kNccl,
                              AllReduceAlgorithm::kHierarchical}},
  };
  v1::AdmitPartRequest request;
  AddDecidedSchedules(sent, nullptr, request);
  ASSERT_EQ(request.schedules_size(), 3);
  EXPECT_EQ(request.schedules(0).op_id(), "fc1");  // op id order
  EXPECT_EQ(request.schedules(0).mode(), "chunked");
  EXPECT_EQ(request.schedules(0).chunks(), 4);
  EXPECT_EQ(request.schedules(1).algorithm(), "hierarchical");
  absl::StatusOr<ops::DecidedSchedules> back = DecidedSchedulesOf(request);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, sent);
}

TEST(ScheduleWireTest, ReasonsTravelAndAPeersTextIsCut) {
  const ops::DecidedSchedules sent = {
      {"fc1", ops::Schedule{OverlapMode::kBulk, 1, Transport::kNccl}},
      {"fc2", ops::Schedule{OverlapMode::kSerial, 1, Transport::kNccl}},
  };
  const ops::DecisionNotes notes = {{"fc1", "decided by the coordinator's planner"}};
  v1::AdmitPartRequest request;
  AddDecidedSchedules(sent, &notes, request);
  EXPECT_EQ(DecisionNotesOf(request), notes);  // fc2 has none
  request.mutable_schedules(1)->set_reason(std::string(5000, 'x') + "\x1b[2J");
  const ops::DecisionNotes back = DecisionNotesOf(request);
  EXPECT_LE(back.at("fc2").size(), size_t{kMaxDecisionNote} + 32);
  EXPECT_EQ(back.at("fc2").find('\x1b'), std::string::npos);
}

TEST(ScheduleWireTest, WhatIsNoDecisionIsRefusedNamingTheOp) {
  v1::AdmitPartRequest request;
  AddDecidedSchedules({{"fc1", ops::Schedule{OverlapMode::kBulk, 1, Transport::kNccl}}}, nullptr, request);
  struct Case {
    const char* what;
    std::function<void(v1::DecidedSchedule&)> change;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"an unknown mode", [](v1::DecidedSchedule& s) { s.set_mode("fast"); }, "unknown mode"},
      {"auto", [](v1::DecidedSchedule& s) { s.set_transport("auto"); },
       "auto is a choice left open"},
      {"no chunks", [](v1::DecidedSchedule& s) { s.set_chunks(0); }, "chunks must be 1 or more"},
      {"an unknown algorithm", [](v1::DecidedSchedule& s) { s.set_algorithm("x"); },
       "unknown"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    v1::AdmitPartRequest changed = request;
    c.change(*changed.mutable_schedules(0));
    absl::StatusOr<ops::DecidedSchedules> back = DecidedSchedulesOf(changed);
    EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(back.status().message(), HasSubstr("schedules: op \"fc1\": "));
    EXPECT_THAT(back.status().message(), HasSubstr(c.message));
  }
  v1::AdmitPartRequest twice = request;
  *twice.add_schedules() = request.schedules(0);
  EXPECT_THAT(DecidedSchedulesOf(twice).status().message(), HasSubstr("decided twice"));
}

}  // namespace
}  // namespace overlap::cluster
