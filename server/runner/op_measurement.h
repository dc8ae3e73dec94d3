// What the job runner measured of one op, phase by phase, as plain values:
// the schedule it chose (and why), the collective alone on each transport,
// the timed rounds, the traced iteration and the check against float64.
// They stay in the runner: an op's report (op_report.h) is made of them at the
// op's end; the figures the runner itself needs (OpFigures) are computed here.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/graph.h"
#include "common/schedule.h"
#include "common/stats.h"
#include "server/ops/reference.h"
#include "server/runner/autotune.h"
#include "server/runner/energy.h"
#include "server/runner/timeline.h"

namespace overlap::runner {

struct ScheduleChoice {
  ops::Schedule schedule;
  std::string reason;                  // why (auto's reasoning, or "as requested")
  std::vector<CandidateScore> scores;  // what autotune timed; empty when it did not tune
};

// The op's collective alone on each transport ({0} where the op has no
// collective beside a GEMM, or at one rank). The faster is "comm alone".
struct CommAlone {
  std::vector<double> nccl{0.0};
  std::vector<double> p2p{0.0};
  Transport fastest = Transport::kNccl;
  EnergyWindow nccl_energy;  // each transport's timed iterations (energy.h)
  EnergyWindow p2p_energy;
};

// The GEMM alone, the GEMM beside the collective and the step, in alternating
// rounds (op_phases.h, TimeRounds), per iteration.
struct TimedRounds {
  std::vector<double> gemm;
  std::vector<double> beside;
  std::vector<double> step;
  std::vector<double> host_enqueue;                // each round's median
  std::vector<std::vector<double>> gemm_by_rank;   // [rank][iteration]
  std::vector<std::vector<double>> step_by_group;  // [group][iteration]; empty when replayed
  bool step_replayed = true;                       // every round's step replayed a graph
  EnergyWindow gemm_energy;  // the rounds' GEMM alone and step, summed (energy.h)
  EnergyWindow step_energy;
};

// One traced iteration (traced_iteration.h): where the step's time went.
struct Timeline {
  double step_ms = 0;  // the traced iteration, max over ranks
  // Enqueued call by call where the timed iterations replayed a graph.
  bool enqueued_not_replayed = false;
  std::vector<TimelineSpan> spans;  // in the order they were enqueued
};

struct OpMeasurement {
  OpSpec op;
  DType dtype = DType::kBF16;
  int tp = 1;  // a group's size
  int groups = 1;
  OpGroup group = OpGroup::kTp;
  bool mesh = false;  // the graph declares one: the report names the group
  ScheduleChoice choice;
  CommAlone comm;
  TimedRounds rounds;
  std::optional<Timeline> timeline;           // spec.timeline
  std::optional<ops::Verification> verified;  // spec.verify
};

// The op's headline figures, as its report gives them: a collective alone is
// its own comm alone, a GEMM alone its own GEMM alone.
struct OpFigures {
  Summary step;
  Summary gemm_alone;
  Summary comm_alone;
  std::vector<double> comm_nccl;  // iteration times of the collective alone on each transport
  std::vector<double> comm_p2p;
  double exposed_comm_ms = 0;  // step - GEMM alone (medians, floored at 0)
  // The step's energy, and beside it the GEMM alone and the collective alone
  // back to back (an op with both and a group above one rank).
  EnergyWindow step_energy;
  EnergyWindow serial_energy;
  double serial_ms = 0;
};
OpFigures FiguresOf(const OpMeasurement& m);

}  // namespace overlap::runner
