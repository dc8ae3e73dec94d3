// What one schedule of one layer op would take, predicted from a cost model
// without running anything: the op's pieces laid on a rank's compute and
// comm lanes as the schedule orders them (server/ops/*.cc), timed by
// RunTwoLanes.
//
// Each piece's critical balance is whether its GEMM (slowed beside the
// transfer) covers its transfer: where every piece's does, only the first
// transfer (all-gather) or the last (reduce-scatter, all-reduce) stays
// exposed, and cutting finer shrinks it at the price of a fixed cost per piece.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/graph.h"
#include "common/planner/cost_model.h"
#include "common/schedule.h"

namespace overlap::planner {

struct OpShape {
  OpType type = OpType::kAgGemm;
  int64_t m = 0, n = 0, k = 0;
  int tp = 1;  // ranks of its group
  DType dtype = DType::kBF16;
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kDefault;  // all_reduce alone
  bool row_parallel = false;  // gemm alone: W split by rows
  int nodes = 1;  // nodes its group spans: above 1 its transfers cross the link between nodes
};

// One piece of a cut schedule: its GEMM (beside the transfer) and the
// transfer that runs beside it.
struct PiecePrediction {
  double gemm_ms = 0;      // slowed beside the transfer, fixed cost included
  double transfer_ms = 0;  // fixed cost included
  bool covered() const { return gemm_ms >= transfer_ms; }
};

struct SchedulePrediction {
  ops::Schedule schedule;
  double step_ms = 0;
  double gemm_alone_ms = 0;  // the whole GEMM of one rank, uncut
  double comm_alone_ms = 0;  // the whole collective over this schedule's transport
  double serial_ms = 0;      // GEMM then collective over this transport
  // 1 - (step - GEMM alone) / comm alone, within [0, 1]; 0 for serial.
  double hidden = 0;
  int pieces = 1;
  PiecePrediction piece;  // a typical (the largest) piece; all equal but for rounding
};

// The most pieces (chunks; tp x chunks for a ring) a prediction lays out.
inline constexpr int64_t kMaxPlannedPieces = int64_t{1} << 16;

// UNIMPLEMENTED where the model cannot say (a transport or layout it has no
// figures or no model for), with the reason.
absl::StatusOr<SchedulePrediction> PredictSchedule(const CostModel& model, const OpShape& op,
                                                   const ops::Schedule& schedule);

}  // namespace overlap::planner
