// The layer step: after every op of a job ran alone, the whole graph runs as
// one timed step, so that a user sees what a layer costs with its ops back to
// back and not only their sum.
//
// It runs a plan (layer_plan.h: order, placement, buckets, chunks, deferrals,
// lanes) in phases that each return a value: agree on the figures, plan, set
// up, warm, time, verify, report. The step is timed as an op's steps are
// (barrier, launch gate, heat head start, max over ranks, graph replay where
// no schedule uses NCCL) and, with verify, every op's output is checked again
// against float64 after a layer iteration. Under scheduler: dynamic the
// deferred lane is dispatched at run time (dynamic_step.h): the step runs live.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/graph.h"
#include "server/engine/engine.h"
#include "server/runner/job_runner.h"
#include "server/runner/layer_plan.h"

namespace overlap::runner {

// Each op's collective's time beside the GEMM ops over its time alone, by spec
// index: the GEMM's measured slowdown beside the op's transport in the
// calibration this node keeps for the op's group size (`tuning_cache`, where
// one matches this engine: MatchingCalibration), else kBesideGemmsFactor.
// Ops without a collective alone get kBesideGemmsFactor (unused).
std::vector<double> BesideGemmsFactors(const engine::Engine& engine, const JobSpec& spec,
                                       const std::vector<int>& devices,
                                       const std::vector<Transport>& transports,
                                       TuningCache* tuning_cache);

// "fc1 -swiglu-> fc2": op `index` and the ops whose outputs lead to its input.
std::string ChainName(const JobSpec& spec, int index);

// The layer step's part of a job's report: the step, or why there is none
// (the buffers of every op do not fit at once).
struct LayerStepOutcome {
  std::optional<LayerStepReport> layer;
  std::string note;
  // How each op that reads another's output got its input in the step, by op
  // id: "alias" | "fused <activation>" | "epilogue gelu" | "copy" (OpReport::edge).
  std::map<std::string, std::string> edges;
};

// Plans the step (layer_plan.h) from what the ops measured alone (`measured`,
// in `order`, the topological order they ran in), sets it up, warms it, times
// it, verifies it and returns its report. A graph of one op, or with the layer
// step off, has neither a report nor a note. Errors as RunJob's.
// `tuning_cache` (may be null) gives the calibrated factors beside the GEMMs
// (BesideGemmsFactors).
absl::StatusOr<LayerStepOutcome> TimeLayerStep(engine::Engine& engine, const JobSpec& spec,
                                               const std::vector<int>& devices,
                                               const RunHooks& hooks, const std::vector<int>& order,
                                               const std::vector<OpMeasurement>& measured,
                                               TuningCache* tuning_cache = nullptr);

}  // namespace overlap::runner
