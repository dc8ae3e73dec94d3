// What a session's graph asks of its ranks, worked out once when the first
// rank opens it: the graph parsed and validated as a job's is (the job path's
// Admission: the same size limits, parse budget and validator), its ranks and
// their devices, each op's schedule and the tensors each rank must register.
//
// Thread safety: PlanSession is a pure function of its arguments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/graph.h"
#include "common/schedule.h"
#include "common/session_ring.h"
#include "server/engine/engine.h"
#include "server/jobs/admission.h"

namespace overlap::sessions {

using TensorKind = SessionTensor;  // common/session_ring.h
inline std::string TensorKindName(TensorKind kind) { return SessionTensorName(kind); }

// One tensor every rank registers: rows x cols of dtype, row-major.
struct TensorNeed {
  int op = -1;  // index into the graph's ops; -1 for SIGNALS
  std::string op_id;
  TensorKind kind = TensorKind::kX;
  int64_t rows = 0;
  int64_t cols = 0;
  DType dtype = DType::kF32;
  int64_t bytes = 0;
};

struct SessionPlan {
  JobSpec graph;                         // validated and fused: its ops are what commands name
  int world = 0;                         // ranks
  std::vector<int> devices;              // by rank
  std::vector<ops::Schedule> schedules;  // by op index
  std::vector<TensorNeed> needs;         // every op's X, W (when it has one), Y; then SIGNALS
};

// INVALID_ARGUMENT naming the field for a graph that does not parse or
// validate here, or that spans nodes; RESOURCE_EXHAUSTED as Admission says.
absl::StatusOr<SessionPlan> PlanSession(const jobs::Admission& admission,
                                        const engine::Engine& engine,
                                        const std::string& graph_text);

// The need for (op, kind), or null. `op` is an op id ("" for SIGNALS).
const TensorNeed* FindNeed(const SessionPlan& plan, const std::string& op, TensorKind kind);

}  // namespace overlap::sessions
