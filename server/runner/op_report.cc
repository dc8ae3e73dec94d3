#include "server/runner/op_report.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "server/ops/reference.h"
#include "server/runner/traced_iteration.h"

namespace overlap::runner {
namespace {

// The op's collective and its bytes as nccl-tests counts them (common/stats.h).
// A gather moves the graph's dtype, a reduction GemmOutputDType (bf16 for fp8).
std::pair<Collective, double> CollectiveBytes(const OpSpec& op, DType dtype) {
  const double gathered = static_cast<double>(DTypeSize(dtype));
  const double es = static_cast<double>(DTypeSize(GemmOutputDType(dtype)));
  switch (op.type) {
    case OpType::kAgGemm:
      return {Collective::kAllGather, static_cast<double>(op.m) * op.k * gathered};
    case OpType::kAllGather:
      return {Collective::kAllGather, static_cast<double>(op.m) * op.n * gathered};
    case OpType::kGemmRs:
    case OpType::kReduceScatter:
      return {Collective::kReduceScatter, static_cast<double>(op.m) * op.n * es};
    case OpType::kGemmAr:
    case OpType::kAllReduce:
      return {Collective::kAllReduce, static_cast<double>(op.m) * op.n * es};
    case OpType::kGemm:
      break;  // moves nothing
  }
  return {Collective::kAllReduce, 0};
}

void SetSchedule(const OpMeasurement& m, OpReport& r) {
  const ops::Schedule& schedule = m.choice.schedule;
  r.id = m.op.id;
  r.type = OpTypeName(m.op.type);
  r.mode = OverlapModeName(schedule.mode);
  r.schedule = schedule.Name();
  r.requested_mode = OverlapModeName(m.op.mode);
  r.transport = TransportName(schedule.transport);
  r.chunks = schedule.chunks;
  r.algorithm = StoredAllReduceAlgorithm(schedule.algorithm);
  r.m = m.op.m;
  r.k = m.op.k;
  r.n = m.op.n;
  r.tp = m.tp;
  r.dtype = DTypeName(m.dtype);
  r.auto_reason = m.choice.reason;
  if (m.mesh) r.group = OpGroupName(m.op.group);
  for (const CandidateScore& c : m.choice.scores) {
    if (std::isfinite(c.best_ms))
      r.candidates.push_back({c.schedule.Name(), c.best_ms, c.runoff_ms});
  }
}

// Each group's median step and the slowest, where a mesh ran several groups
// and each was timed (one group, world, has the op's step as its own).
void SetGroupSteps(const OpMeasurement& m, OpReport& r) {
  const std::vector<std::vector<double>>& by_group = m.rounds.step_by_group;
  const bool every_group_timed = std::none_of(
      by_group.begin(), by_group.end(), [](const std::vector<double>& t) { return t.empty(); });
  if (!m.mesh || by_group.size() < 2 || !every_group_timed) return;
  double slowest = -1;
  for (size_t g = 0; g < by_group.size(); ++g) {
    const double median = Summarize(by_group[g]).median;
    r.group_step_ms.push_back(median);
    if (median > slowest) {
      slowest = median;
      r.slowest_group = static_cast<int>(g);
    }
  }
}

// The step, the GEMM and the collective alone, beside each other, per rank.
void SetTimings(const OpMeasurement& m, const OpFigures& figures, OpReport& r) {
  const bool gemm_only = IsGemmOnly(m.op.type);
  const bool both = !gemm_only && !IsCollectiveOnly(m.op.type);
  r.step = figures.step;
  r.gemm_alone = figures.gemm_alone;
  for (const std::vector<double>& t : m.rounds.gemm_by_rank) {
    if (!t.empty()) r.gemm_alone_rank_ms.push_back(Summarize(t).median);
  }
  if (!gemm_only) r.comm_alone = figures.comm_alone;
  r.host_enqueue_ms = Summarize(m.rounds.host_enqueue).median;
  r.graph_replay = m.rounds.step_replayed;
  if (m.timeline) {
    r.timeline = *m.timeline;
    r.timeline->enqueued_not_replayed = m.rounds.step_replayed;
    r.compute_wait_rank_ms = ComputeWaitByRank(*r.timeline, m.tp * m.groups);
  }
  if (m.tp > 1 && !gemm_only) {
    r.comm_alone_nccl = Summarize(figures.comm_nccl);
    r.comm_alone_p2p = Summarize(figures.comm_p2p);
  }
  if (m.tp > 1 && both) {
    r.gemm_beside_comm = Summarize(m.rounds.beside);
    if (figures.gemm_alone.median > 0) {
      r.gemm_slowdown = r.gemm_beside_comm->median / figures.gemm_alone.median;
    }
  }
  SetGroupSteps(m, r);
}

}  // namespace

OpReport ReportOf(const OpMeasurement& m) {
  OpReport r;
  SetSchedule(m, r);
  const OpFigures figures = FiguresOf(m);
  SetTimings(m, figures, r);
  const Summary& comm = figures.comm_alone;
  r.exposed_comm_ms = figures.exposed_comm_ms;
  // A collective alone has nothing to hide behind: all of it is exposed.
  r.hidden_fraction = IsCollectiveOnly(m.op.type) ? 0.0
                      : comm.median > 0           ? 1.0 - r.exposed_comm_ms / comm.median
                                                  : 1.0;
  r.ideal_ms = std::max(figures.gemm_alone.median, comm.median);
  if (figures.step.median > 0) r.tflops = OpFlops(m.op) / (figures.step.median * 1e-3) / 1e12;
  const auto [collective, bytes] = CollectiveBytes(m.op, m.dtype);
  if (comm.median > 0) {
    r.algbw_gbps = AlgBwGBps(bytes, comm.median);
    r.busbw_gbps = BusBwGBps(collective, bytes, comm.median, m.tp);
  }
  r.energy =
      EnergyOf(figures.step_energy, figures.step.median, figures.serial_energy, figures.serial_ms);
  if (r.energy.valid) r.joules_per_tflop = JoulesPerTflop(r.energy.step_joules, OpFlops(m.op));
  r.tolerance = ops::OutputTolerance(m.op.type, m.dtype, m.tp);
  if (m.verified) {
    r.verified = true;
    r.max_rel_error = m.verified->max_rel_error;
  }
  return r;
}

}  // namespace overlap::runner
