// Which collectives a layer step defers: one definition, which the runtime's
// layer step (server/runner/layer_step.cc) and the planner's layer estimate
// (planner::EstimateLayer) both use, so that what the planner predicts beside
// the compute is what the daemon runs there.
//
// A collective alone (all_gather, reduce_scatter, all_reduce) is deferred
// when no op waits on it (`after` or `input`), or only collectives that are
// deferred themselves do: a gradient all-reduce, over any group. The step
// sends it beside the ops after it and joins it at the step's end
// (scheduler: static where it stands, scheduler: dynamic on the deferred lane
// once its producer's event completes). A collective an op waits on is
// critical: it stays on the step's path (the runtime may still run it on a
// side stream beside GEMMs before its waiter, joined there).
#pragma once

#include <vector>

#include "common/graph.h"

namespace overlap {

// By index into spec.ops; all false for a graph whose dependencies do not
// resolve (the validator refuses it).
std::vector<bool> DeferredCollectives(const JobSpec& spec);

}  // namespace overlap
