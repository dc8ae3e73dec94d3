// The layer step: after every op of a job ran alone, the whole graph runs as
// one timed step, so that a user sees what a layer costs with its ops back to
// back and not only their sum.
//
// The ops run in the layer order (LayerOrder) on the main streams with the
// schedules their own runs chose, except the collectives alone that have a GEMM op to
// run beside: those are deferred, run on each rank's second comm stream
// (communicator channel 1) beside the ops that follow them, and are joined
// back into the main streams before the first op that waits on them (the
// all-gather of a weight-gradient GEMM's input, overlapped with the data-
// gradient GEMM before it, as TransformerEngine's bulk overlap does), or by
// the end of the step, the bound they may be deferred to, when no op waits on
// them (a data-parallel gradient all-reduce). Deferred all-reduces over one transport
// are merged into buckets of up to JobSpec::bucket_mib, each fired where its
// last member ran, as PyTorch DDP buckets gradients. The step is timed as an op's steps are
// (barrier, launch gate, heat head start, max over ranks, graph replay where
// no schedule uses NCCL) and, with verify, every op's output is checked again
// against float64 after a layer iteration. That is scheduler: static; under
// scheduler: dynamic the all-reduces nothing waits on go to the deferred lane
// instead, dispatched at run time (dynamic_step.h), and the step runs live.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/graph.h"
#include "server/engine/engine.h"
#include "server/runner/job_runner.h"

namespace overlap::runner {

// The order of the layer step: a topological order of `spec`'s ops that, among
// the ops ready to go, sends a collective alone that an op waits on first (it
// then lands as early as it can, beside the GEMM ops that follow it), then a
// collective alone that nothing waits on (a gradient all-reduce), but only
// when it would be off the side stream before any collective that an op waits
// on could be sent, so that it never holds one up; then the GEMM ops, and
// last the collectives that did not fit. `alone_ms` (each op's time alone, by
// spec index) is what "would be off" is judged by: the GEMM ops back to back,
// a collective taken at `beside_gemms` times its time alone beside them (by
// spec index; empty or 0: kBesideGemmsFactor). Without `alone_ms`, a
// collective that nothing waits on goes only once no collective that an op
// waits on is left to send. Ties go in file order (TopologicalOrder with these
// keys). Returns spec indices, or TopologicalOrder's error.
//
// The order is a function of the graph and these figures alone, so every rank
// of a job runs one order: on one daemon every rank is in this process; a job
// spanning daemons first agrees on the figures (each node's measurements
// averaged by an all-reduce, the same bits on every node) and then derives the
// same order everywhere. Each communicator therefore sees its collectives in
// one sequence on every rank, and so does the deferred lane's (the dispatcher
// keeps this order, dynamic_step.h).
absl::StatusOr<std::vector<int>> LayerOrder(const JobSpec& spec,
                                            const std::vector<double>& alone_ms = {},
                                            const std::vector<double>& beside_gemms = {});

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

// `order` is the topological order the ops ran in and `result` holds what
// they measured in that order; sets result's layer, or its layer_note when
// the step cannot be measured (the buffers of every op do not fit at once).
// A graph of one op, or with the layer step off, has neither. Errors as RunJob's.
// `tuning_cache` (may be null) gives the calibrated factors beside the GEMMs
// (BesideGemmsFactors).
absl::Status TimeLayerStep(engine::Engine& engine, const JobSpec& spec,
                           const std::vector<int>& devices, const RunHooks& hooks,
                           const std::vector<int>& order, JobReport* result,
                           TuningCache* tuning_cache = nullptr);

}  // namespace overlap::runner
