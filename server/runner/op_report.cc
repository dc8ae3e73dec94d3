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

void SetSchedule(const OpMeasurement& m, v1::OpResult* res) {
  const ops::Schedule& schedule = m.choice.schedule;
  res->set_id(m.op.id);
  res->set_type(OpTypeName(m.op.type));
  res->set_mode(OverlapModeName(schedule.mode));
  res->set_schedule(schedule.Name());
  res->set_requested_mode(OverlapModeName(m.op.mode));
  res->set_transport(TransportName(schedule.transport));
  res->set_chunks(schedule.chunks);
  res->set_algorithm(StoredAllReduceAlgorithm(schedule.algorithm));
  res->set_m(m.op.m);
  res->set_k(m.op.k);
  res->set_n(m.op.n);
  res->set_tp(m.tp);
  res->set_dtype(DTypeName(m.dtype));
  res->set_auto_reason(m.choice.reason);
  if (m.mesh) res->set_group(OpGroupName(m.op.group));
  for (const CandidateScore& c : m.choice.scores) {
    if (!std::isfinite(c.best_ms)) continue;
    v1::CandidateTiming* t = res->add_candidates();
    t->set_schedule(c.schedule.Name());
    t->set_best_ms(c.best_ms);
    t->set_runoff_ms(c.runoff_ms);
  }
}

}  // namespace

v1::TimingStats ToProto(const Summary& s) {
  v1::TimingStats t;
  t.set_median_ms(s.median);
  t.set_min_ms(s.min);
  t.set_max_ms(s.max);
  t.set_samples(s.samples);
  return t;
}

v1::Progress ToProto(const Progress& p) {
  v1::Progress out;
  out.set_op_index(p.op_index);
  out.set_op_count(p.op_count);
  out.set_op_id(p.op_id);
  out.set_phase(p.phase);
  out.set_iteration(p.iteration);
  out.set_iterations(p.iterations);
  return out;
}

v1::OpResult OpReport(const OpMeasurement& m) {
  v1::OpResult res;
  SetSchedule(m, &res);
  const OpType type = m.op.type;
  const bool collective_only = IsCollectiveOnly(type);
  const bool gemm_only = IsGemmOnly(type);
  const bool both = !collective_only && !gemm_only;
  // A collective alone is its own comm alone, and a GEMM alone its own GEMM alone.
  const std::vector<double>& step_t = m.rounds.step;
  std::vector<double> nccl_t = m.comm.nccl, p2p_t = m.comm.p2p;
  std::vector<double> comm_t = m.comm.fastest == Transport::kP2p ? p2p_t : nccl_t;
  if (collective_only) {
    comm_t = step_t;
    (m.choice.schedule.transport == Transport::kP2p ? p2p_t : nccl_t) = step_t;
  }
  const std::vector<double>& gemm_t = gemm_only ? step_t : m.rounds.gemm;
  const Summary step = Summarize(step_t), gemm = Summarize(gemm_t), comm = Summarize(comm_t);
  *res.mutable_step() = ToProto(step);
  *res.mutable_gemm_alone() = ToProto(gemm);
  for (const std::vector<double>& t : m.rounds.gemm_by_rank) {
    if (!t.empty()) res.add_gemm_alone_rank_ms(Summarize(t).median);
  }
  if (!gemm_only) *res.mutable_comm_alone() = ToProto(comm);
  res.set_host_enqueue_ms(Summarize(m.rounds.host_enqueue).median);
  res.set_graph_replay(m.rounds.step_replayed);
  if (m.timeline) {
    v1::Timeline* timeline = res.mutable_timeline();
    *timeline = *m.timeline;
    timeline->set_enqueued_not_replayed(m.rounds.step_replayed);
    for (double ms : ComputeWaitByRank(*timeline, m.tp * m.groups)) res.add_compute_wait_rank_ms(ms);
  }
  if (m.tp > 1 && !gemm_only) {
    *res.mutable_comm_alone_nccl() = ToProto(Summarize(nccl_t));
    *res.mutable_comm_alone_p2p() = ToProto(Summarize(p2p_t));
  }
  if (m.tp > 1 && both) {
    const Summary beside = Summarize(m.rounds.beside);
    *res.mutable_gemm_beside_comm() = ToProto(beside);
    if (gemm.median > 0) res.set_gemm_slowdown(beside.median / gemm.median);
  }
  const bool every_group_timed =
      std::none_of(m.rounds.step_by_group.begin(), m.rounds.step_by_group.end(),
                   [](const std::vector<double>& t) { return t.empty(); });
  // One group (world) has the op's step as its own.
  if (m.mesh && m.rounds.step_by_group.size() > 1 && every_group_timed) {
    double slowest = -1;
    for (size_t g = 0; g < m.rounds.step_by_group.size(); ++g) {
      const double median = Summarize(m.rounds.step_by_group[g]).median;
      res.add_group_step_ms(median);
      if (median > slowest) {
        slowest = median;
        res.set_slowest_group(static_cast<int>(g));
      }
    }
  }
  const double exposed = std::max(0.0, step.median - gemm.median);
  res.set_exposed_comm_ms(exposed);
  // A collective alone has nothing to hide behind: all of it is exposed.
  res.set_hidden_fraction(collective_only   ? 0.0
                          : comm.median > 0 ? 1.0 - exposed / comm.median
                                            : 1.0);
  res.set_ideal_ms(std::max(gemm.median, comm.median));
  if (step.median > 0) res.set_tflops(OpFlops(m.op) / (step.median * 1e-3) / 1e12);
  const auto [collective, bytes] = CollectiveBytes(m.op, m.dtype);
  if (comm.median > 0) {
    res.set_algbw_gbps(AlgBwGBps(bytes, comm.median));
    res.set_busbw_gbps(BusBwGBps(collective, bytes, comm.median, m.tp));
  }
  res.set_tolerance(ops::OutputTolerance(type, m.dtype, m.tp));
  if (m.verified) {
    res.set_verified(true);
    res.set_max_rel_error(m.verified->max_rel_error);
  }
  return res;
}

}  // namespace overlap::runner
