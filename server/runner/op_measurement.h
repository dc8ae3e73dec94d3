// What the job runner measured of one op, phase by phase, as plain values:
// the schedule it chose (and why), the collective alone on each transport,
// the timed rounds, the traced iteration and the check against float64.
// OpReport (op_report.h) is the one place these become a v1::OpResult.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/graph.h"
#include "overlap/v1/overlap.pb.h"
#include "server/ops/reference.h"
#include "server/ops/schedule.h"
#include "server/runner/autotune.h"

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
};

// The GEMM alone, the GEMM beside the collective and the step, in alternating
// rounds (op_phases.h, TimeRounds), per iteration.
struct TimedRounds {
  std::vector<double> gemm;
  std::vector<double> beside;
  std::vector<double> step;
  std::vector<double> host_enqueue;  // each round's median
  std::vector<std::vector<double>> gemm_by_rank;  // [rank][iteration]
  std::vector<std::vector<double>> step_by_group;  // [group][iteration]; empty when replayed
  bool step_replayed = true;                      // every round's step replayed a graph
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
  std::optional<v1::Timeline> timeline;        // spec.timeline
  std::optional<ops::Verification> verified;   // spec.verify
};

}  // namespace overlap::runner
