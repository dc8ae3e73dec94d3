// The planner: predicts every candidate schedule of an op from a calibration
// (common/planner/op_model.h), names the best, and tells `auto` which few
// candidates are worth measuring. Pure arithmetic: it runs nothing.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/graph.h"
#include "common/planner/op_model.h"

namespace overlap::planner {

struct CandidateVerdict {
  ops::Schedule schedule;
  std::string cannot_say;  // why the planner has no figure; empty when predicted
};

struct OpPlan {
  std::string op_id;
  OpShape shape;
  std::vector<SchedulePrediction> predicted;  // fastest first
  std::vector<CandidateVerdict> unpredicted;  // where the model cannot say
  // The fastest predicted, or nullptr when nothing could be predicted.
  const SchedulePrediction* best() const { return predicted.empty() ? nullptr : &predicted[0]; }
};

OpShape ShapeOf(const OpSpec& op, int group_size, DType dtype);

// How many nodes one of `group`'s groups spans over `world` ranks,
// `devices_per_node` to a node, node-major (1 when devices_per_node is 0).
int NodesSpanned(const Mesh& mesh, OpGroup group, int world, int devices_per_node);

// `nodes`: how many nodes the op's group spans (NodesSpanned).
OpPlan PlanOp(const CostModel& model, const OpSpec& op, int group_size, DType dtype,
              const std::vector<ops::Schedule>& candidates, int nodes = 1);

// A layer's step from its ops' best predictions: the ops on the compute lane
// in the graph's order, and beside them the collectives the layer step defers
// (DeferredCollectives: those no op waits for, such as gradient all-reduces,
// over any group), each from the moment its inputs are done, slowing the
// GEMMs beside it by `slowdown`.
struct LayerEstimate {
  double step_ms = 0;      // predicted, deferred all-reduces beside the compute
  double compute_ms = 0;   // the ops that are not deferred, one after another
  double deferred_ms = 0;  // the deferred all-reduces alone
  int deferred = 0;        // how many
  std::vector<std::string> unpredicted;  // ops left out: the planner could not say
  // Of the deferred time, the share under the compute: 1 - (step - compute) / deferred.
  double hidden = 0;
};
// `plans` in the order of `spec.ops`; an op with no prediction counts 0.
LayerEstimate EstimateLayer(const JobSpec& spec, const std::vector<OpPlan>& plans, double slowdown);

// How many of `count` candidates `auto` measures when the planner chooses:
// all of six or fewer, else a third.
size_t MeasureBudget(size_t count);

// The indices into `candidates` that `auto` should measure, in the order
// given: serial over NCCL when it is there (the fallback, always measured),
// every candidate the planner cannot say anything about, and then the
// fastest predicted until MeasureBudget is spent.
std::vector<size_t> CandidatesToMeasure(const OpPlan& plan,
                                        const std::vector<ops::Schedule>& candidates);

}  // namespace overlap::planner
