#include "server/sessions/session_plan.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "common/checked_size.h"
#include "common/session_ring.h"
#include "common/status_macros.h"
#include "server/ops/decided_schedules.h"
#include "server/ops/op_context.h"

namespace overlap::sessions {
namespace {

absl::StatusOr<TensorNeed> Need(int op_index, const OpSpec& op, TensorKind kind, int64_t rows,
                                int64_t cols, DType dtype) {
  TensorNeed need{op_index, op.id, kind, rows, cols, dtype, 0};
  const std::string field = absl::StrCat("ops.", op.id, ".", TensorKindName(kind));
  ASSIGN_OR_RETURN(const int64_t elements, CheckedMul(rows, cols, field));
  ASSIGN_OR_RETURN(need.bytes,
                   CheckedBytes(elements, static_cast<int64_t>(DTypeSize(dtype)), field));
  return need;
}

}  // namespace

absl::StatusOr<SessionPlan> PlanSession(const jobs::Admission& admission,
                                        const engine::Engine& engine,
                                        const std::string& graph_text) {
  ASSIGN_OR_RETURN(JobSpec spec, admission.Parse(graph_text, "session graph"));
  ASSIGN_OR_RETURN(jobs::AdmittedJob admitted,
                   admission.Admit(std::move(spec), graph_text, "session graph"));
  SessionPlan plan;
  plan.graph = admitted.graph->spec;
  plan.devices = admitted.graph->devices;
  plan.world = static_cast<int>(plan.devices.size());
  if (plan.world < 1) return absl::InvalidArgumentError("devices: a session needs one rank");
  // No autotune for a session (its tensors are the client's, and its ranks
  // run now): each op runs what the rule for jobs spanning daemons picks.
  ASSIGN_OR_RETURN(
      const ops::DecidedSchedules decided,
      ops::DecideSpanningSchedules(plan.graph, plan.world, engine.LibraryAlgorithms()));
  for (size_t i = 0; i < plan.graph.ops.size(); ++i) {
    const OpSpec& op = plan.graph.ops[i];
    plan.schedules.push_back(decided.at(op.id));
    const int tp = GroupSize(plan.graph.mesh, op.group, plan.world);
    const LocalShapes shapes = LocalShapesFor(op, tp);
    const ops::BufferDTypes dtypes = ops::BufferDTypesFor(op.type, plan.graph.dtype);
    const int index = static_cast<int>(i);
    ASSIGN_OR_RETURN(TensorNeed x,
                     Need(index, op, TensorKind::kX, shapes.a_rows, shapes.a_cols, dtypes.a));
    plan.needs.push_back(x);
    if (shapes.w_rows > 0 && shapes.w_cols > 0) {
      ASSIGN_OR_RETURN(TensorNeed w,
                       Need(index, op, TensorKind::kW, shapes.w_rows, shapes.w_cols, dtypes.w));
      plan.needs.push_back(w);
    }
    ASSIGN_OR_RETURN(TensorNeed y,
                     Need(index, op, TensorKind::kY, shapes.y_rows, shapes.y_cols, dtypes.y));
    plan.needs.push_back(y);
  }
  TensorNeed signals;
  signals.kind = TensorKind::kSignals;
  signals.rows = 1;
  signals.cols = static_cast<int64_t>(kSignalBytes / sizeof(uint64_t));
  // Two 64-bit words: the reply names their dtype "u64".
  signals.bytes = static_cast<int64_t>(kSignalBytes);
  plan.needs.push_back(signals);
  return plan;
}

const TensorNeed* FindNeed(const SessionPlan& plan, const std::string& op, TensorKind kind) {
  for (const TensorNeed& need : plan.needs) {
    if (need.op_id == op && need.kind == kind) return &need;
  }
  return nullptr;
}

}  // namespace overlap::sessions
