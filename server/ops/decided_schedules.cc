#include "server/ops/decided_schedules.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "common/planner/planner.h"
#include "common/text.h"

namespace overlap::ops {
namespace {

std::vector<Schedule> CandidatesOver(const JobSpec& spec, const OpSpec& op, int world,
                                     bool library_algorithms) {
  return CandidateSchedules(op, GroupSize(spec.mesh, op.group, world), library_algorithms,
                            spec.mesh);
}

}  // namespace

namespace {

// The fastest predicted of `candidates` that move data through collectives
// only; nullopt where the planner can say nothing of any.
std::optional<planner::SchedulePrediction> Planned(const SpanningPlanner& p, const JobSpec& spec,
                                                   const OpSpec& op, int world,
                                                   const std::vector<Schedule>& candidates) {
  std::vector<Schedule> collectives_only;
  for (const Schedule& s : candidates) {
    if (CollectivesOnly(s)) collectives_only.push_back(s);
  }
  const int nodes = planner::NodesSpanned(spec.mesh, op.group, world, p.devices_per_node);
  const planner::OpPlan plan = planner::PlanOp(*p.model, op, GroupSize(spec.mesh, op.group, world),
                                               spec.dtype, collectives_only, nodes);
  if (plan.best() == nullptr) return std::nullopt;
  return *plan.best();
}

}  // namespace

absl::StatusOr<DecidedSchedules> DecideSpanningSchedules(const JobSpec& spec, int world,
                                                         bool library_algorithms,
                                                         const SpanningPlanner* planner,
                                                         DecisionNotes* notes) {
  DecidedSchedules decided;
  for (const OpSpec& op : spec.ops) {
    const std::vector<Schedule> candidates = CandidatesOver(spec, op, world, library_algorithms);
    absl::StatusOr<Schedule> schedule = SpanningSchedule(candidates);
    if (!schedule.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("op ", op.id, ": ", schedule.status().message()));
    }
    std::string note =
        "decided by the coordinator, by the rule for jobs spanning daemons (no autotune across "
        "them)";
    if (planner != nullptr && planner->model != nullptr && candidates.size() > 1) {
      if (auto best = Planned(*planner, spec, op, world, candidates)) {
        note = absl::StrFormat(
            "decided by the coordinator's planner (no autotune across daemons): predicted %.3f "
            "ms, the fastest of the schedules that move data through collectives only",
            best->step_ms);
        if (!(best->schedule == *schedule)) {
          absl::StrAppend(&note, " (the rule would have run ", schedule->Name(), ")");
        }
        schedule = best->schedule;
      } else {
        absl::StrAppend(&note, "; the planner could predict none of its schedules");
      }
    }
    decided[op.id] = *schedule;
    if (notes != nullptr) (*notes)[op.id] = note;
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
