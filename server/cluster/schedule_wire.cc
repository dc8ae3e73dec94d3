#include "server/cluster/schedule_wire.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/text.h"

namespace overlap::cluster {
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

}  // namespace

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

}  // namespace overlap::cluster
