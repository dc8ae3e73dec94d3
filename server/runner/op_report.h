// One op's report, as plain values: everything the job's report shows of it,
// the figures already derived (hidden fraction, TFLOP/s, bus bandwidth, the
// GEMM's slowdown, each rank's compute wait, the slowest group). The runner
// makes it from an OpMeasurement at the op's end (ReportOf), and the raw
// rounds stay in the runner; the queue, the store, the coordinator and the
// wire (server/wire/) see only this.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/stats.h"
#include "server/runner/energy.h"
#include "server/runner/op_measurement.h"

namespace overlap::runner {

// One schedule autotune timed: its best median and its runoff's (0 when it
// was not in the runoff).
struct CandidateReport {
  std::string schedule;
  double best_ms = 0;
  double runoff_ms = 0;
};

struct OpReport {
  // What ran, named as the report names it (common/ enum names).
  std::string id;
  std::string type;
  std::string mode;  // the mode that ran (auto resolved)
  std::string requested_mode;
  std::string schedule;  // e.g. "ring/2/p2p"
  std::string transport;
  std::string algorithm;  // an all_reduce's; "" for the transport's own
  std::string dtype;
  std::string group;  // in a mesh: tp | dp | world; "" without one
  std::string auto_reason;
  int chunks = 0;
  int64_t m = 0, k = 0, n = 0;
  int tp = 1;                               // a group's size
  std::vector<CandidateReport> candidates;  // what autotune timed, in its order

  // Timings (medians in ms). A GEMM alone has no comm_alone; the transports'
  // own and the GEMM beside the collective need one above one rank.
  Summary step;
  Summary gemm_alone;
  std::optional<Summary> comm_alone;
  std::optional<Summary> comm_alone_nccl;
  std::optional<Summary> comm_alone_p2p;
  std::optional<Summary> gemm_beside_comm;
  double gemm_slowdown = 0;  // beside / alone; 0 where not measured
  std::vector<double> gemm_alone_rank_ms;
  double host_enqueue_ms = 0;
  bool graph_replay = false;
  std::optional<Timeline> timeline;
  std::vector<double> compute_wait_rank_ms;  // from the timeline, per rank
  // In a mesh of several groups: each group's step, and the slowest's index.
  std::vector<double> group_step_ms;
  int slowest_group = 0;

  // Derived figures.
  double exposed_comm_ms = 0;
  double hidden_fraction = 0;
  double ideal_ms = 0;
  double tflops = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  // Energy (energy.h): per step, average power, serial beside it, and the
  // step's joules per TFLOP of work; energy.valid false without a counter.
  EnergyFigures energy;
  double joules_per_tflop = 0;

  // The float64 check.
  double tolerance = 0;
  bool verified = false;
  double max_rel_error = 0;

  // Set by the coordinator of a job spanning daemons: the op's groups cross nodes.
  bool spans_nodes = false;

  // In the layer step, how the op's input came from the op it reads
  // (OpSpec::input): "alias" (it read that op's output buffer: no copy, no
  // launch), "fused <activation>" (one elementwise pass), "copy" (one pass
  // that casts, e.g. into an fp8 input); "" for seeded inputs or no step.
  std::string edge;
};

// The op's report from what the runner measured of it.
OpReport ReportOf(const OpMeasurement& m);

}  // namespace overlap::runner
