#include "server/wire/peer_wire.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/text.h"
#include "server/wire/report_wire.h"
#include "server/wire/same_name_fields.h"

#define PART_REQUEST_FIELDS(F) \
  F(spec) F(node_index) F(owner) F(owner_name) F(owner_admin) F(priority) F(name) F(check_only)

namespace overlap::wire {
namespace {

absl::Status InOp(const std::string& op_id, const absl::Status& status) {
  return absl::InvalidArgumentError(
      absl::StrCat("schedules: op ", QuotedExcerpt(op_id, 80), ": ", status.message()));
}

absl::StatusOr<ops::Schedule> ScheduleOf(const v1::DecidedSchedule& wire) {
  ops::Schedule schedule;
  ASSIGN_OR_RETURN(schedule.mode, ParseOverlapMode(wire.mode()));
  ASSIGN_OR_RETURN(schedule.transport, ParseTransport(wire.transport()));
  ASSIGN_OR_RETURN(schedule.algorithm, ParseAllReduceAlgorithm(wire.algorithm()));
  if (schedule.mode == OverlapMode::kAuto || schedule.transport == Transport::kAuto ||
      schedule.algorithm == AllReduceAlgorithm::kAuto) {
    return absl::InvalidArgumentError("auto is a choice left open, not one decided");
  }
  if (wire.chunks() < 1) return absl::InvalidArgumentError("chunks must be 1 or more");
  schedule.chunks = wire.chunks();
  return schedule;
}

void AddDecidedSchedules(const ops::DecidedSchedules& decided, const ops::DecisionNotes* notes,
                         v1::AdmitPartRequest& request) {
  for (const auto& [op_id, schedule] : decided) {
    v1::DecidedSchedule* wire = request.add_schedules();
    if (notes != nullptr) {
      if (auto note = notes->find(op_id); note != notes->end()) wire->set_reason(note->second);
    }
    wire->set_op_id(op_id);
    wire->set_mode(OverlapModeName(schedule.mode));
    wire->set_chunks(schedule.chunks);
    wire->set_transport(TransportName(schedule.transport));
    wire->set_algorithm(AllReduceAlgorithmName(schedule.algorithm));
  }
}

absl::StatusOr<ops::DecidedSchedules> DecidedSchedulesOf(const v1::AdmitPartRequest& request) {
  ops::DecidedSchedules decided;
  for (const v1::DecidedSchedule& wire : request.schedules()) {
    absl::StatusOr<ops::Schedule> schedule = ScheduleOf(wire);
    if (!schedule.ok()) return InOp(wire.op_id(), schedule.status());
    if (!decided.emplace(wire.op_id(), *schedule).second) {
      return InOp(wire.op_id(), absl::InvalidArgumentError("decided twice"));
    }
  }
  return decided;
}

ops::DecisionNotes DecisionNotesOf(const v1::AdmitPartRequest& request) {
  ops::DecisionNotes notes;
  for (const v1::DecidedSchedule& wire : request.schedules()) {
    if (!wire.reason().empty()) notes[wire.op_id()] = Excerpt(wire.reason(), kMaxDecisionNote);
  }
  return notes;
}

}  // namespace

v1::GlobalJobId ToProto(const peer::GlobalJobId& id) {
  v1::GlobalJobId wire;
  wire.set_coordinator(id.coordinator);
  wire.set_job_id(id.job_id);
  return wire;
}

peer::GlobalJobId FromProto(const v1::GlobalJobId& id) {
  return peer::GlobalJobId{id.coordinator(), id.job_id()};
}

v1::AdmitPartRequest ToProto(const peer::PartRequest& in) {
  v1::AdmitPartRequest out;
  PART_REQUEST_FIELDS(WIRE_SET)
  *out.mutable_global_id() = ToProto(in.global_id);
  for (const std::string& node : in.nodes) out.add_nodes(node);
  AddDecidedSchedules(in.schedules, &in.notes, out);
  return out;
}

absl::StatusOr<peer::PartRequest> FromProto(const v1::AdmitPartRequest& in) {
  peer::PartRequest out;
  ASSIGN_OR_RETURN(out.schedules, DecidedSchedulesOf(in));
  out.notes = DecisionNotesOf(in);
  PART_REQUEST_FIELDS(WIRE_GET)
  out.global_id = FromProto(in.global_id());
  out.nodes.assign(in.nodes().begin(), in.nodes().end());
  return out;
}

v1::CancelPartRequest ToProto(const peer::CancelRequest& request) {
  v1::CancelPartRequest wire;
  *wire.mutable_global_id() = ToProto(request.global_id);
  wire.set_reason(request.reason);
  return wire;
}

peer::CancelRequest FromProto(const v1::CancelPartRequest& wire) {
  return peer::CancelRequest{FromProto(wire.global_id()), wire.reason()};
}

v1::HoldPartRequest ToProto(const peer::HoldRequest& request) {
  v1::HoldPartRequest wire;
  *wire.mutable_global_id() = ToProto(request.global_id);
  wire.set_node_index(request.node_index);
  wire.set_part_id(request.part_id);
  wire.set_wait_ms(absl::ToInt64Milliseconds(request.wait));
  return wire;
}

peer::HoldRequest FromProto(const v1::HoldPartRequest& wire) {
  return peer::HoldRequest{FromProto(wire.global_id()), wire.node_index(), wire.part_id(),
                           absl::Milliseconds(wire.wait_ms())};
}

// peer::HoldDecision lists the decisions in the proto's numbering.
v1::HoldPartResponse ToProto(const peer::HoldAnswer& answer) {
  v1::HoldPartResponse wire;
  wire.set_decision(static_cast<v1::HoldPartResponse::Decision>(answer.decision));
  wire.set_reason(answer.reason);
  return wire;
}

peer::HoldAnswer FromProto(const v1::HoldPartResponse& wire) {
  const int decision = wire.decision();
  // One a later version may add: ask again.
  const bool known = decision >= 0 && decision <= static_cast<int>(peer::HoldDecision::kCancel);
  return peer::HoldAnswer{
      known ? static_cast<peer::HoldDecision>(decision) : peer::HoldDecision::kWait, wire.reason()};
}

v1::ReportPartRequest ToProto(const peer::PartReport& report) {
  v1::ReportPartRequest wire;
  *wire.mutable_global_id() = ToProto(report.global_id);
  wire.set_node_index(report.node_index);
  wire.set_part_id(report.part_id);
  if (report.outcome.ok()) {
    *wire.mutable_result() = ToProto(*report.outcome);
  } else {
    wire.set_error_code(static_cast<int>(report.outcome.status().code()));
    wire.set_error(std::string(report.outcome.status().message()));
  }
  return wire;
}

peer::PartReport FromProto(const v1::ReportPartRequest& wire) {
  peer::PartReport report;
  report.global_id = FromProto(wire.global_id());
  report.node_index = wire.node_index();
  report.part_id = wire.part_id();
  if (wire.error_code() == 0) {
    report.outcome = FromProto(wire.result());
  } else {
    report.outcome = absl::Status(static_cast<absl::StatusCode>(wire.error_code()), wire.error());
  }
  return report;
}

namespace {

// What both store calls send: the job's store and the key in it.
template <typename Request>
Request StoreRequest(const peer::StoreCall& call) {
  Request wire;
  *wire.mutable_global_id() = ToProto(call.global_id);
  wire.set_key(call.key);
  return wire;
}

}  // namespace

v1::StoreSetRequest ToStoreSet(const peer::StoreCall& call) {
  auto wire = StoreRequest<v1::StoreSetRequest>(call);
  wire.set_value(call.value);
  return wire;
}

v1::StoreGetRequest ToStoreGet(const peer::StoreCall& call) {
  auto wire = StoreRequest<v1::StoreGetRequest>(call);
  wire.set_timeout_ms(absl::ToInt64Milliseconds(call.timeout));
  return wire;
}

peer::StoreCall FromProto(const v1::StoreSetRequest& wire) {
  return peer::StoreCall{FromProto(wire.global_id()), wire.key(), wire.value(),
                         absl::ZeroDuration()};
}

peer::StoreCall FromProto(const v1::StoreGetRequest& wire) {
  return peer::StoreCall{FromProto(wire.global_id()), wire.key(), "",
                         absl::Milliseconds(wire.timeout_ms())};
}

}  // namespace overlap::wire
