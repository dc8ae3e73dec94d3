// What a job's run measured, as plain values: the runner returns a JobReport,
// the queue keeps it, the coordinator of a job spanning daemons merges its
// parts' (adding the per-node lines), and those that speak the wire (rpc/,
// peer/, the store's rows) convert it with server/wire/ at their edge, field
// by field both ways. A new measurement is a field here, and its line in
// server/wire/report_wire.cc.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/stats.h"
#include "server/engine/engine.h"
#include "server/runner/op_report.h"

namespace overlap::runner {

// One collective the layer step ran on the side streams beside later ops.
struct LayerDeferral {
  std::string op;   // the op's id, or bucket(a+b+...) for merged all-reduces
  std::string how;  // whole | bucketed | chunked
  int pieces = 1;
  int64_t piece_bytes = 0;    // chunked: the bytes of each piece
  std::string joined_before;  // the op the main streams waited for it before; "" = the end
  double alone_ms = 0;        // its time alone (a bucket: its members' sum)
  // scheduler: dynamic, on the deferred lane: when (ms after the iteration
  // started, on the device's clock, the latest rank; medians over the dispatch
  // iterations) its input was ready, its first chunk started and its last
  // finished; the worst delay (finished - ready) against the bound; and how
  // its chunks went, summed over the dispatch iterations: yielded to critical
  // work, forced by a near deadline.
  bool dispatched = false;
  double ready_ms = 0;
  double first_chunk_ms = 0;
  double finished_ms = 0;
  double worst_delay_ms = 0;
  double bound_ms = 0;
  int chunks_yielded = 0;
  int chunks_forced = 0;
};

// scheduler: dynamic, per device (medians over the dispatch iterations): how
// long deferred chunks ran while a critical collective was in flight there (an
// upper bound on how long critical work waited behind deferred work, priority
// inversion: ~0 when priority held), and how long the deferred lane was busy.
struct LaneFigures {
  int device = 0;
  double inversion_ms = 0;
  double deferred_busy_ms = 0;
};

// An op that reads another's output, checked against the float64 reference
// of its whole chain after a layer iteration (ops/chain_reference.h).
struct LayerChainCheck {
  std::string op;
  std::string chain;  // "fc1 -swiglu-> fc2"
  double max_rel_error = 0;
  double tolerance = 0;
};

// The whole graph as one step (layer_step.h).
struct LayerStepReport {
  Summary step;
  std::vector<std::string> order;          // op ids, in the order the step ran them
  std::vector<std::string> deferred;       // ops run on the side streams
  std::vector<std::string> joined_before;  // beside `deferred`: what waited for each
  // The step's median less the ops' GEMMs alone and the activation passes
  // (floored at 0); 0 when no op communicates (tp 1).
  double exposed_comm_ms = 0;
  // The activation passes alone (each wired input made from its producer's
  // output through its activation, e.g. SwiGLU); 0 without wired inputs.
  double activation_ms = 0;
  std::optional<Timeline> timeline;  // spec.timeline
  std::vector<LayerDeferral> deferrals;
  // With deferrals: the step without them, and how much of them hid.
  std::optional<Summary> without_deferred;
  double deferred_hidden_fraction = 0;
  std::vector<LayerChainCheck> chains;  // with verify
  // How the deferred collectives were sent: "static" (planned before the
  // step) or "dynamic" (dispatched at run time; the step then runs live, not
  // replayed from a captured graph: captured = false).
  std::string scheduler = "static";
  bool captured = false;        // the timed step replayed one captured graph
  std::string lanes;            // Engine::DescribeLanes, under dynamic
  int dispatch_iterations = 0;  // dynamic: the iterations the figures below come from
  std::vector<LaneFigures> lane_figures;
  std::vector<std::string> scheduler_notes;  // what the bound or chunk size could not keep
  // The step's energy (energy.h), its ops op by op beside it (the serial_
  // figures): each op's own timed step, one of each (energy.h, OneStepOfEach).
  EnergyFigures energy;
  double joules_per_tflop = 0;
};

// A job spanning daemons: one node's part, as the coordinator merged it.
struct NodeReport {
  std::string node;  // the peer address
  int node_index = 0;
  std::string part_id;  // the part's job id on that node
  int first_rank = 0;   // its ranks are [first_rank, first_rank + ranks)
  int ranks = 0;
  double total_step_ms = 0;
  double layer_step_ms = 0;  // 0 without a layer step
  int slowest_rank = 0;      // global rank of its slowest (largest GEMM alone) rank; -1: none
  std::string backend;
  std::string gpu;
};

struct JobReport {
  // What ran it.
  std::string backend;
  bool launch_gate = false;
  std::string head_start;  // with launch gates: "heat" | "idle"
  double preheat_ms = 0;
  int nccl_overlap_ctas = 0;
  int ranks_per_gpu = 1;
  int mesh_tp = 0;
  int mesh_dp = 0;
  std::string overlapd_version;
  std::string gpu;  // the group's first device
  engine::BackendVersions versions;
  std::map<std::string, std::string> library_env;
  // Each op, in the order they ran, and their step medians and exposed
  // communication summed.
  std::vector<OpReport> ops;
  double total_step_ms = 0;
  double total_exposed_comm_ms = 0;
  // What the overlap pass fused, and what it left alone (JobSpec::fusions).
  std::vector<FusionNote> fusions;
  // The layer step (jobs of two or more ops), or why there is none.
  std::optional<LayerStepReport> layer;
  std::string layer_note;
  // A job spanning daemons (the coordinator's merge): a line per node, the
  // slowest rank and its node, and the bus bandwidth across nodes.
  std::vector<NodeReport> nodes;
  int slowest_rank = 0;
  std::string slowest_node;
  double inter_node_busbw_gbps = 0;
};

}  // namespace overlap::runner
