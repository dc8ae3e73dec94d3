#include "server/runner/job_runner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/checked_size.h"
#include "common/graph_validator.h"
#include "common/library_env.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "overlap_git_commit.h"
#include "server/flight/flight_engine.h"
#include "server/ops/op_context.h"
#include "server/runner/layer_memory.h"
#include "server/runner/layer_step.h"
#include "server/runner/op_phases.h"
#include "server/runner/op_run.h"
#include "server/runner/tuning_cache.h"

namespace overlap::runner {

using ops::BufferBytes;
using ops::BufferDTypesFor;
using ops::OpContext;

namespace {

// Checked between the phases that allocate (an op's buffers, its inputs), so
// that a cancelled job stops allocating at once rather than at its next timed
// iteration.
absl::Status NotCancelled(const RunHooks& hooks) {
  if (hooks.cancelled && hooks.cancelled()) return absl::CancelledError("cancelled by request");
  return absl::OkStatus();
}

// The group lists, buffers and loops below are sized by the mesh: it must be
// the one the validator checked against these devices (in 64 bits).
absl::Status CheckMeshCoversDevices(const JobSpec& spec, const std::vector<int>& devices) {
  if (!spec.mesh.declared() ||
      MeshCovers(spec.mesh.tp, spec.mesh.dp, static_cast<int64_t>(devices.size()))) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("mesh: tp x dp = ", spec.mesh.tp, " x ",
                                                 spec.mesh.dp, " does not cover the job's ",
                                                 devices.size(), " devices"));
}

// One op, phase by phase (op_phases.h): what they measured.
absl::StatusOr<OpMeasurement> RunOp(engine::Engine& engine, const JobSpec& spec,
                                   const std::vector<int>& devices, const RunHooks& hooks,
                                   const ChoiceSources& sources, int op_index, int op_count,
                                   const OpSpec& op) {
  const flight::ScopedFlightOp flight_label(op.id);
  ASSIGN_OR_RETURN(std::unique_ptr<OpContext> ctx, CreateOpContext(engine, spec, devices, op));
  OpRun run{engine, spec, hooks, op_index, op_count, *ctx};
  run.Progress("setup", 0, 0);
  RETURN_IF_ERROR(NotCancelled(hooks));
  RETURN_IF_ERROR(PrepareInputs(run));
  OpMeasurement m;
  m.op = op;
  m.dtype = spec.dtype;
  m.tp = ctx->group_size();
  m.groups = ctx->groups();
  m.group = op.group;
  m.mesh = spec.mesh.declared();
  ASSIGN_OR_RETURN(m.choice, ChooseSchedule(run, sources));
  ASSIGN_OR_RETURN(m.comm, TimeCommAlone(run));
  // The collective alone left the SMs idle: the first GEMM alone would run
  // rested, faster than the steps after it, and make the ideal too low.
  RETURN_IF_ERROR(run.Preheat());
  ASSIGN_OR_RETURN(m.rounds, TimeRounds(run, m.choice.schedule, m.comm.fastest));
  ASSIGN_OR_RETURN(m.timeline, TraceOp(run, m.choice.schedule));
  ASSIGN_OR_RETURN(m.verified, VerifyOp(run, m.choice.schedule));
  return m;
}

}  // namespace


absl::StatusOr<JobReport> RunJob(engine::Engine& engine, const JobSpec& spec,
                                 const std::vector<int>& devices, const RunHooks& hooks,
                                 const ScheduleSource& source) {
  RETURN_IF_ERROR(CheckMeshCoversDevices(spec, devices));
  ASSIGN_OR_RETURN(std::vector<int> order, TopologicalOrder(spec));
  // A part of a job spanning daemons runs only what its coordinator decided
  // (nodes that tuned apart would choose apart, and their collectives would
  // pair up wrongly): refused here, before its first collective waits on the
  // other nodes, and ChooseSchedule need not ask again.
  if (SpansDaemons(engine, devices)) {
    for (const OpSpec& op : spec.ops) {
      if (source.decided == nullptr || source.decided->count(op.id) == 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "op ", op.id,
            ": its ranks span daemons, and a part runs only the schedules its coordinator "
            "decided; none was given"));
      }
    }
  }
  JobReport result;
  result.backend = engine.Name();
  result.fusions = spec.fusions;
  result.launch_gate = engine.Gates() != nullptr;
  if (result.launch_gate) result.head_start = spec.heat_head_start ? "heat" : "idle";
  if (result.launch_gate && spec.heat_head_start) result.preheat_ms = engine.PreheatMs();
  result.nccl_overlap_ctas = engine.CollectiveSmBudget();
  result.ranks_per_gpu = engine.RanksPerGpu();
  result.mesh_tp = spec.mesh.tp;
  result.mesh_dp = spec.mesh.dp;
  result.versions = engine.Versions();
  result.overlapd_version = absl::StrCat(OVERLAP_VERSION, " (", OVERLAP_GIT_COMMIT, ")");
  if (!devices.empty()) result.gpu = engine.GetDeviceInfo(devices[0]).name;
  result.library_env = LibraryEnvironment();
  // A job that asked to retune ignores every choice tuned before it started
  // (and replaces it); ones its own earlier ops tuned still answer.
  const ChoiceSources sources{source.decided, source.tuning_cache,
                              spec.retune ? absl::ToUnixMillis(absl::Now()) : 0,
                              source.decided_notes};
  JobReport header = result;  // before any op: what on_op_done gets beside each op
  double total = 0, exposed = 0;
  std::vector<OpMeasurement> measured;  // the raw rounds, which the layer step plans from
  for (size_t i = 0; i < order.size(); ++i) {
    const OpSpec& op = spec.ops[order[i]];
    RETURN_IF_ERROR(NotCancelled(hooks));
    absl::StatusOr<OpMeasurement> op_result =
        RunOp(engine, spec, devices, hooks, sources, order[i], static_cast<int>(order.size()), op);
    if (!op_result.ok()) {
      // Drain what is still queued and consume the asynchronous errors it left,
      // so that the next job on these devices starts clean; report the first error.
      const absl::Status drained = engine.Synchronize(devices);
      if (!drained.ok()) {
        GetLogger("ops")->debug("after a failed op: {}", std::string(drained.message()));
      }
      return op_result.status();
    }
    OpReport op_report = ReportOf(*op_result);
    total += op_report.step.median;
    exposed += op_report.exposed_comm_ms;
    header.total_step_ms = total;
    header.total_exposed_comm_ms = exposed;
    if (hooks.on_op_done) hooks.on_op_done(header, op_report);
    result.ops.push_back(std::move(op_report));
    measured.push_back(std::move(op_result).value());
  }
  result.total_step_ms = total;
  result.total_exposed_comm_ms = exposed;
  absl::StatusOr<LayerStepOutcome> layer =
      TimeLayerStep(engine, spec, devices, hooks, order, measured, source.tuning_cache);
  if (!layer.ok()) {
    const absl::Status drained = engine.Synchronize(devices);
    if (!drained.ok()) {
      GetLogger("ops")->debug("after a failed layer step: {}", std::string(drained.message()));
    }
    return layer.status();
  }
  result.layer = std::move(layer->layer);
  result.layer_note = std::move(layer->note);
  for (OpReport& op : result.ops) {
    if (auto it = layer->edges.find(op.id); it != layer->edges.end()) op.edge = it->second;
  }
  return result;
}

namespace {

// Whether a head start of `rows` of m may take half of them instead.
bool HalvesFurther(int64_t rows, int64_t m) {
  return rows % 2 == 0 && rows / 2 >= std::max<int64_t>(1, m / kHeadStartMinShare);
}

}  // namespace

HeadStartPlan PlanHeadStart(double host_ms, double gemm_ms, int64_t m) {
  const double needed = 1.25 * host_ms + kHeadStartMarginMs;
  HeadStartPlan plan;
  plan.whole_gemms = static_cast<int>(needed / gemm_ms);
  const double rest = needed - plan.whole_gemms * gemm_ms;
  plan.rows = m;
  while (HalvesFurther(plan.rows, m) &&
         gemm_ms * static_cast<double>(plan.rows / 2) / static_cast<double>(m) >= rest) {
    plan.rows /= 2;
  }
  return plan;
}

std::vector<int64_t> HeadStartRows(int64_t m) {
  std::vector<int64_t> rows;
  for (int64_t r = m; HalvesFurther(r, m);) rows.push_back(r /= 2);
  return rows;
}

int PreheatGemms(double ms, double gemm_ms) {
  if (!(gemm_ms > 0) || !(ms > 0)) return 0;
  return static_cast<int>(
      std::clamp(std::ceil(ms / gemm_ms), 1.0, static_cast<double>(kPreheatMaxGemms)));
}

namespace {

// Bytes of the job's largest op alone, on each device.
int64_t LargestOpBytes(const JobSpec& spec, int tp) {
  int64_t worst = 0;
  for (const OpSpec& op : spec.ops) {
    const int degree = GroupSize(spec.mesh, op.group, tp);
    // In double: absurd shapes must saturate, not wrap, so that they are refused.
    const double bytes =
        BufferBytes(OpAloneSizes(op, degree, spec.mesh), BufferDTypesFor(op.type, spec.dtype));
    if (bytes >= 9.0e18) return std::numeric_limits<int64_t>::max();
    worst = std::max(worst, static_cast<int64_t>(bytes));
  }
  return worst;
}

}  // namespace

JobBytes JobBytesOf(const JobSpec& spec, int tp) {
  JobBytes bytes;
  bytes.required = LargestOpBytes(spec, tp);
  bytes.peak = bytes.required;
  // As RunJob decides whether to time the layer step.
  if (spec.layer_step && spec.ops.size() >= 2) {
    bytes.peak = std::max(bytes.peak, LayerStepBytesPerDevice(spec, tp));
  }
  return bytes;
}

int64_t JobBytesPerDevice(const JobSpec& spec, int tp) { return JobBytesOf(spec, tp).peak; }

}  // namespace overlap::runner
