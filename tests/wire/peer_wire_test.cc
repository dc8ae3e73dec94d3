// The peer calls' mapping (server/wire/peer_wire.h): a call with every field
// set reaches every field of its message, and each message comes back whole
// through the job core's types; the coordinator's decisions come back as
// they were sent, and what is no decision is refused naming the op.
#include "server/wire/peer_wire.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/message_differencer.h"
#include "tests/wire/unset_fields.h"

namespace overlap::wire {
namespace {

using google::protobuf::Message;
using google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

// A part's result has its own test (report_wire_test).
const char kResult[] = "overlap.v1.JobResult";

void ExpectSame(const Message& a, const Message& b) {
  std::string diff;
  MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differencer.Compare(a, b)) << diff;
}

const peer::GlobalJobId kId{"127.0.0.1:7001", "job-000007"};

peer::PartRequest EveryPartField() {
  peer::PartRequest request;
  request.global_id = kId;
  request.spec = "name: mlp\n";
  request.node_index = 1;
  request.nodes = {"127.0.0.1:7001", "127.0.0.1:7002"};
  request.owner = "uid:1000";
  request.owner_name = "ada";
  request.owner_admin = true;
  request.priority = 7;
  request.name = "mlp";
  request.check_only = true;
  ops::Schedule ring{OverlapMode::kRing, 4, Transport::kNccl};
  ring.algorithm = AllReduceAlgorithm::kTree;
  request.schedules = {{"ar", ring},
                       {"fc", ops::Schedule{OverlapMode::kSerial, 1, Transport::kNone}}};
  request.notes = {{"ar", "the rule: ring over nodes"}};
  return request;
}

TEST(PeerWireTest, EveryFieldOfAPartRequestReachesTheMessageAndComesBack) {
  const v1::AdmitPartRequest wire = ToProto(EveryPartField());
  EXPECT_EQ(Unset(wire), std::vector<std::string>{});
  absl::StatusOr<peer::PartRequest> back = FromProto(wire);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSame(wire, ToProto(*back));
  EXPECT_EQ(back->global_id.Key(), "127.0.0.1:7001/job-000007");
  EXPECT_EQ(back->nodes, EveryPartField().nodes);
  EXPECT_EQ(back->schedules, EveryPartField().schedules);
  EXPECT_EQ(back->notes, EveryPartField().notes);
  EXPECT_TRUE(back->owner_admin);
  EXPECT_EQ(back->priority, 7);
}

// A part request carrying `schedules` and `notes` only.
v1::AdmitPartRequest WithSchedules(const ops::DecidedSchedules& schedules,
                                   const ops::DecisionNotes& notes = {}) {
  peer::PartRequest request;
  request.schedules = schedules;
  request.notes = notes;
  return ToProto(request);
}

TEST(ScheduleWireTest, DecisionsComeBackAsTheyWereSent) {
  const ops::DecidedSchedules sent = {
      {"fc1", ops::Schedule{OverlapMode::kChunked, 4, Transport::kNccl}},
      {"wgrad", ops::Schedule{OverlapMode::kSerial, 1, Transport::kNone}},
      {"grads",
       ops::Schedule{OverlapMode::kSerial, 1, Transport::kNccl, AllReduceAlgorithm::kHierarchical}},
  };
  const v1::AdmitPartRequest request = WithSchedules(sent);
  ASSERT_EQ(request.schedules_size(), 3);
  EXPECT_EQ(request.schedules(0).op_id(), "fc1");  // op id order
  EXPECT_EQ(request.schedules(0).mode(), "chunked");
  EXPECT_EQ(request.schedules(0).chunks(), 4);
  EXPECT_EQ(request.schedules(1).algorithm(), "hierarchical");
  absl::StatusOr<peer::PartRequest> back = FromProto(request);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->schedules, sent);
}

TEST(ScheduleWireTest, ReasonsTravelAndAPeersTextIsCut) {
  const ops::DecidedSchedules sent = {
      {"fc1", ops::Schedule{OverlapMode::kBulk, 1, Transport::kNccl}},
      {"fc2", ops::Schedule{OverlapMode::kSerial, 1, Transport::kNccl}},
  };
  const ops::DecisionNotes notes = {{"fc1", "decided by the coordinator's planner"}};
  v1::AdmitPartRequest request = WithSchedules(sent, notes);
  EXPECT_EQ(FromProto(request)->notes, notes);  // fc2 has none
  request.mutable_schedules(1)->set_reason(std::string(5000, 'x') + "\x1b[2J");
  const ops::DecisionNotes back = FromProto(request)->notes;
  EXPECT_LE(back.at("fc2").size(), size_t{kMaxDecisionNote} + 32);
  EXPECT_EQ(back.at("fc2").find('\x1b'), std::string::npos);
}

TEST(ScheduleWireTest, WhatIsNoDecisionIsRefusedNamingTheOp) {
  const v1::AdmitPartRequest request =
      WithSchedules({{"fc1", ops::Schedule{OverlapMode::kBulk, 1, Transport::kNccl}}});
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
      {"an unknown algorithm", [](v1::DecidedSchedule& s) { s.set_algorithm("x"); }, "unknown"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    v1::AdmitPartRequest changed = request;
    c.change(*changed.mutable_schedules(0));
    absl::StatusOr<peer::PartRequest> back = FromProto(changed);
    EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(back.status().message(), HasSubstr("schedules: op \"fc1\": "));
    EXPECT_THAT(back.status().message(), HasSubstr(c.message));
  }
  v1::AdmitPartRequest twice = request;
  *twice.add_schedules() = request.schedules(0);
  EXPECT_THAT(FromProto(twice).status().message(), HasSubstr("decided twice"));
}

TEST(PeerWireTest, EveryFieldOfTheSmallCallsReachesTheMessageAndComesBack) {
  const v1::CancelPartRequest cancel = ToProto(peer::CancelRequest{kId, "cancelled by ada"});
  EXPECT_EQ(Unset(cancel), std::vector<std::string>{});
  ExpectSame(cancel, ToProto(FromProto(cancel)));

  const v1::HoldPartRequest hold =
      ToProto(peer::HoldRequest{kId, 1, "job-000042", absl::Milliseconds(1500)});
  EXPECT_EQ(Unset(hold), std::vector<std::string>{});
  ExpectSame(hold, ToProto(FromProto(hold)));
  EXPECT_EQ(FromProto(hold).wait, absl::Milliseconds(1500));

  const peer::StoreCall call{kId, "rank_0", std::string("a\0b", 3), absl::Seconds(2)};
  const v1::StoreSetRequest set = ToStoreSet(call);
  const v1::StoreGetRequest get = ToStoreGet(call);
  EXPECT_EQ(Unset(set), std::vector<std::string>{});
  EXPECT_EQ(Unset(get), std::vector<std::string>{});
  ExpectSame(set, ToStoreSet(FromProto(set)));
  ExpectSame(get, ToStoreGet(FromProto(get)));
  EXPECT_EQ(FromProto(set).value, std::string("a\0b", 3));
  EXPECT_EQ(FromProto(get).timeout, absl::Seconds(2));
}

TEST(PeerWireTest, EveryHoldDecisionComesBack) {
  using D = peer::HoldDecision;
  for (D decision : {D::kWait, D::kStart, D::kRelease, D::kCancel}) {
    const v1::HoldPartResponse wire = ToProto(peer::HoldAnswer{decision, "why"});
    EXPECT_EQ(FromProto(wire).decision, decision);
    EXPECT_EQ(FromProto(wire).reason, "why");
    ExpectSame(wire, ToProto(FromProto(wire)));
  }
  EXPECT_EQ(ToProto(peer::HoldAnswer{D::kCancel, ""}).decision(), v1::HoldPartResponse::CANCEL);
  // A decision a later version may add: ask again.
  v1::HoldPartResponse unknown;
  unknown.set_decision(static_cast<v1::HoldPartResponse::Decision>(9));
  EXPECT_EQ(FromProto(unknown).decision, D::kWait);
}

TEST(PeerWireTest, APartsReportCarriesItsResultOrItsFailure) {
  runner::JobReport result;
  result.backend = "host";
  const v1::ReportPartRequest ok = ToProto(peer::PartReport{kId, 1, "job-000042", result});
  EXPECT_EQ(Unset(ok, kResult), (std::vector<std::string>{"error_code", "error"}));
  ExpectSame(ok, ToProto(FromProto(ok)));
  ASSERT_TRUE(FromProto(ok).outcome.ok());
  EXPECT_EQ(FromProto(ok).outcome->backend, "host");

  const v1::ReportPartRequest failed =
      ToProto(peer::PartReport{kId, 1, "job-000042", absl::AbortedError("a peer went away")});
  EXPECT_EQ(Unset(failed), std::vector<std::string>{"result"});
  ExpectSame(failed, ToProto(FromProto(failed)));
  EXPECT_EQ(FromProto(failed).outcome.status(), absl::AbortedError("a peer went away"));
}

}  // namespace
}  // namespace overlap::wire
