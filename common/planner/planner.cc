#include "common/planner/planner.h"

#include <algorithm>

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
