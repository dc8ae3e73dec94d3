#include "server/ops/decided_schedules.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/text.h"

namespace overlap::ops {
namespace {

std::vector<Schedule> CandidatesOver(const JobSpec& spec, const OpSpec& op, int world,
                                     bool library_algorithms) {
  return CandidateSchedules(op, GroupSize(spec.mesh, op.group, world), library_algorithms,
                            spec.mesh);
}

}  // namespace

absl::StatusOr<DecidedSchedules> DecideSpanningSchedules(const JobSpec& spec, int world,
                                                         bool library_algorithms) {
  DecidedSchedules decided;
  for (const OpSpec& op : spec.ops) {
    absl::StatusOr<Schedule> schedule =
        SpanningSchedule(CandidatesOver(spec, op, world, library_algorithms));
    if (!schedule.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("op ", op.id, ": ", schedule.status().message()));
    }
    decided[op.id] = *schedule;
  }
  return decided;
}

absl::Status CheckDecidedSchedules(const JobSpec& spec, int world, bool library_algorithms,
                                   const DecidedSchedules& decided) {
  for (const auto& entry : decided) {
    const std::string& id = entry.first;
    const bool known = std::any_of(spec.ops.begin(), spec.ops.end(),
                                   [&](const OpSpec& op) { return op.id == id; });
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("schedules: the graph has no op ", QuotedExcerpt(id, 80)));
    }
  }
  for (const OpSpec& op : spec.ops) {
    const auto found = decided.find(op.id);
    if (found == decided.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("schedules: none was decided for op ", op.id));
    }
    const Schedule& schedule = found->second;
    const std::vector<Schedule> candidates = CandidatesOver(spec, op, world, library_algorithms);
    const bool runnable = CollectivesOnly(schedule) &&
                          std::find(candidates.begin(), candidates.end(), schedule) !=
                              candidates.end();
    if (!runnable) {
      std::vector<std::string> names;
      for (const Schedule& s : candidates) {
        if (CollectivesOnly(s)) names.push_back(s.Name());
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "schedules: op ", op.id, ": the coordinator decided ", schedule.Name(),
          ", which this node does not run for it across daemons (it would run ",
          names.empty() ? "none" : absl::StrJoin(names, ", "),
          "): the nodes' versions or backends differ"));
    }
  }
  return absl::OkStatus();
}

}  // namespace overlap::ops
