#include "common/planner/planner.h"

#include <algorithm>
#include <map>
#include <set>

#include "common/deferred_collectives.h"
#include "common/graph_validator.h"
#include "common/planner/two_lanes.h"

namespace overlap::planner {

OpShape ShapeOf(const OpSpec& op, int group_size, DType dtype) {
  OpShape shape;
  shape.type = op.type;
  shape.m = op.m;
  shape.n = op.n;
  shape.k = op.k;
  shape.tp = group_size;
  shape.dtype = dtype;
  shape.algorithm = op.algorithm;
  shape.row_parallel = op.row_parallel;
  return shape;
}

int NodesSpanned(const Mesh& mesh, OpGroup group, int world, int devices_per_node) {
  if (devices_per_node <= 0 || world <= devices_per_node) return 1;
  const std::vector<std::vector<int>> groups = GroupsOf(mesh, group, world);
  if (groups.empty()) return 1;
  std::vector<int> nodes;
  for (int rank : groups[0]) nodes.push_back(rank / devices_per_node);
  std::sort(nodes.begin(), nodes.end());
  return static_cast<int>(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
}

OpPlan PlanOp(const CostModel& model, const OpSpec& op, int group_size, DType dtype,
              const std::vector<ops::Schedule>& candidates, int nodes) {
  OpPlan plan;
  plan.op_id = op.id;
  plan.shape = ShapeOf(op, group_size, dtype);
  plan.shape.nodes = nodes;
  for (const ops::Schedule& s : candidates) {
    absl::StatusOr<SchedulePrediction> p = PredictSchedule(model, plan.shape, s);
    if (p.ok()) {
      plan.predicted.push_back(*p);
    } else {
      plan.unpredicted.push_back({s, std::string(p.status().message())});
    }
  }
  // Stable: between equal predictions, the candidates' own order (serial first).
  std::stable_sort(plan.predicted.begin(), plan.predicted.end(),
                   [](const SchedulePrediction& a, const SchedulePrediction& b) {
                     return a.step_ms < b.step_ms;
                   });
  return plan;
}

LayerEstimate EstimateLayer(const JobSpec& spec, const std::vector<OpPlan>& plans,
                            double slowdown) {
  const std::vector<bool> deferred_ops = DeferredCollectives(spec);
  std::vector<LaneTask> tasks;
  std::map<std::string, int> task_of;
  LayerEstimate out;
  absl::StatusOr<std::vector<int>> order = TopologicalOrder(spec);
  if (!order.ok()) return out;
  for (int i : *order) {
    const OpSpec& op = spec.ops[i];
    const double ms = plans[i].best() ? plans[i].best()->step_ms : 0;
    if (plans[i].best() == nullptr) out.unpredicted.push_back(op.id);
    const bool deferred = deferred_ops[i];
    std::vector<int> deps;
    for (const std::string& id : op.after) {
      if (auto it = task_of.find(id); it != task_of.end()) deps.push_back(it->second);
    }
    task_of[op.id] = static_cast<int>(tasks.size());
    tasks.push_back(LaneTask{deferred, ms, deps});
    (deferred ? out.deferred_ms : out.compute_ms) += ms;
    out.deferred += deferred;
  }
  // Ops on one lane run in order: a compute op waits for the one before it.
  out.step_ms = RunTwoLanes(tasks, slowdown).step_ms;
  if (out.deferred_ms > 0) {
    out.hidden = std::clamp(1 - (out.step_ms - out.compute_ms) / out.deferred_ms, 0.0, 1.0);
  }
  return out;
}

size_t MeasureBudget(size_t count) { return count <= 6 ? count : count / 3; }

std::vector<size_t> CandidatesToMeasure(const OpPlan& plan,
                                        const std::vector<ops::Schedule>& candidates) {
  std::vector<bool> chosen(candidates.size(), false);
  size_t taken = 0;
  auto take = [&](const ops::Schedule& s) {
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (!chosen[i] && candidates[i] == s) {
        chosen[i] = true;
        ++taken;
        return;
      }
    }
  };
  take(ops::Schedule{OverlapMode::kSerial, 1, Transport::kNccl});
  for (const CandidateVerdict& v : plan.unpredicted) take(v.schedule);
  const size_t budget = MeasureBudget(candidates.size());
  for (const SchedulePrediction& p : plan.predicted) {
    if (taken >= budget) break;
    take(p.schedule);
  }
  std::vector<size_t> out;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (chosen[i]) out.push_back(i);
  }
  return out;
}

}  // namespace overlap::planner
