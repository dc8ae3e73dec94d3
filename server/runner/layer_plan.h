// The layer step's plan (layer_step.h): everything the step decides before
// anything runs, as a value. From the graph, the job's devices and what each
// op's own run decided (its schedule, its time alone, its collective's factor
// beside the GEMMs) it computes, with no engine and no clock:
//   - the layer order (LayerOrder);
//   - placement: each op's devices (group after group) and streams: the main
//     streams, the side streams (communicator channel 1: deferred beside the
//     GEMM ops after it, joined before the first op that waits on it, as
//     TransformerEngine's bulk overlap) or, under scheduler: dynamic, the
//     deferred lane (dispatched at run time, dynamic_step.h);
//   - buckets: deferred gradient all-reduces merged up to bucket_mib, as
//     PyTorch DDP buckets gradients;
//   - chunks: a deferred all-reduce cut into row ranges of about chunk_kib;
//   - deferrals and their bounds: where each deferred op joins the main
//     streams (scheduler: static, defer_bound_ms by the ops' times alone), and
//     notes where the bound or the chunk size cannot be kept (dynamic).
// Every node of a job spanning daemons computes the same plan from the same
// agreed figures, so each communicator sees one sequence of collectives.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/graph.h"
#include "common/schedule.h"
#include "server/ops/layer_ops.h"
#include "server/runner/job_report.h"

namespace overlap::runner {

// How much longer than alone a collective is taken to run beside the GEMM ops
// (LayerOrder's fit, the dispatcher's chunk time) where the node keeps no
// calibration for its transport: they contend for HBM and NVLink and, over
// NCCL, for SMs. Where one is kept, its measured slowdown beside that
// transport is used instead (BesideGemmsFactors, layer_step.h).
inline constexpr double kBesideGemmsFactor = 1.5;

// One op of the step as planned (a bucket: the all-reduce that merges several).
struct PlannedOp {
  int spec_index = 0;  // the op's index in the spec: its input seeds
  OpSpec op;
  ops::Schedule schedule;
  std::vector<int> devices;  // the op's ranks' devices, group after group
  bool deferred = false;     // on the side streams
  // scheduler: dynamic: a deferred op nothing waits on, sent chunk by chunk
  // on the deferred lane by the run-time dispatcher (dynamic_step.h).
  bool on_deferred_lane = false;
  std::string join_before;            // the first op that waits for it; "" = the end of the step
  std::vector<std::string> bucketed;  // a bucket: the ids of the all-reduces it merges
  // A chunked all-reduce (JobSpec::chunk_kib): its rows in pieces, the first
  // sent where it stands and each next one after the next op on the main
  // streams; empty = whole.
  std::vector<ops::RowRange> pieces;
  double alone_ms = 0;  // its collective alone (a bucket: its members'), from their own runs
  // How much longer than alone its collective runs beside the GEMM ops
  // (BesideGemmsFactors, layer_step.h): what the dispatcher expects of a chunk.
  double beside_gemms = 0;
};

// What each op's own run decided, by spec index; every node of a job spanning
// daemons holds the same figures (layer_step.cc agrees on them first).
struct PlanFigures {
  std::vector<ops::Schedule> schedules;
  std::vector<double> alone_ms;
  std::vector<double> beside_gemms;  // 0: kBesideGemmsFactor
};

struct LayerPlan {
  std::vector<int> order;          // the layer order, spec indices
  std::vector<PlannedOp> ops;      // in the order the step enqueues them
  int timed_by = 0;                // the op whose main streams time the step
  std::vector<std::string> notes;  // what the bound or the chunk size cannot keep
};

// The plan of `spec`'s step over `devices`. `side_streams`: the engine has a
// second stream per role (without, nothing is deferred). INVALID_ARGUMENT when
// the figures do not cover every op, or LayerOrder's error.
absl::StatusOr<LayerPlan> PlanLayerStep(const JobSpec& spec, const std::vector<int>& devices,
                                        const PlanFigures& figures, bool side_streams);

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
// of a job runs one order; each communicator therefore sees its collectives
// in one sequence on every rank, and so does the deferred lane's (the
// dispatcher keeps this order, dynamic_step.h).
absl::StatusOr<std::vector<int>> LayerOrder(const JobSpec& spec,
                                            const std::vector<double>& alone_ms = {},
                                            const std::vector<double>& beside_gemms = {});

// `op`'s factor: its own, or kBesideGemmsFactor where none was set.
inline double BesideGemmsOf(const PlannedOp& op) {
  return op.beside_gemms > 0 ? op.beside_gemms : kBesideGemmsFactor;
}

// The plan's deferred ops as the report lists them (how each is sent, its
// pieces, where it joins); the dispatch figures are left to the step.
std::vector<LayerDeferral> Deferrals(const LayerPlan& plan, const JobSpec& spec);

// What `op` sends in one iteration: its pieces, or 1 (the whole op).
int Pieces(const PlannedOp& op);

}  // namespace overlap::runner
