#include "server/report/result_proto.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/library_env.h"
#include "server/ops/reference.h"
#include "server/runner/job_runner.h"
#include "server/runner/traced_iteration.h"

namespace overlap::report {
namespace {

using runner::OpMeasurement;

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
  for (const runner::CandidateScore& c : m.choice.scores) {
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

v1::Progress ToProto(const runner::Progress& p) {
  v1::Progress out;
  out.set_op_index(p.op_index);
  out.set_op_count(p.op_count);
  out.set_op_id(p.op_id);
  out.set_phase(p.phase);
  out.set_iteration(p.iteration);
  out.set_iterations(p.iterations);
  return out;
}

v1::Timeline ToProto(const runner::Timeline& timeline) {
  v1::Timeline out;
  out.set_step_ms(timeline.step_ms);
  out.set_enqueued_not_replayed(timeline.enqueued_not_replayed);
  for (const runner::TimelineSpan& span : timeline.spans) {
    v1::TimelineSpan* s = out.add_spans();
    s->set_op(span.op);
    s->set_rank(span.rank);
    s->set_lane(span.lane);
    s->set_kind(span.kind);
    s->set_name(span.name);
    s->set_start_ms(span.start_ms);
    s->set_end_ms(span.end_ms);
  }
  return out;
}

v1::OpResult ToProto(const OpMeasurement& m) {
  v1::OpResult res;
  SetSchedule(m, &res);
  const OpType type = m.op.type;
  const bool collective_only = IsCollectiveOnly(type);
  const bool gemm_only = IsGemmOnly(type);
  const bool both = !collective_only && !gemm_only;
  const runner::OpFigures figures = runner::FiguresOf(m);
  const Summary& step = figures.step;
  const Summary& gemm = figures.gemm_alone;
  const Summary& comm = figures.comm_alone;
  *res.mutable_step() = ToProto(step);
  *res.mutable_gemm_alone() = ToProto(gemm);
  for (const std::vector<double>& t : m.rounds.gemm_by_rank) {
    if (!t.empty()) res.add_gemm_alone_rank_ms(Summarize(t).median);
  }
  if (!gemm_only) *res.mutable_comm_alone() = ToProto(comm);
  res.set_host_enqueue_ms(Summarize(m.rounds.host_enqueue).median);
  res.set_graph_replay(m.rounds.step_replayed);
  if (m.timeline) {
    runner::Timeline timeline = *m.timeline;
    timeline.enqueued_not_replayed = m.rounds.step_replayed;
    *res.mutable_timeline() = ToProto(timeline);
    for (double ms : runner::ComputeWaitByRank(timeline, m.tp * m.groups)) {
      res.add_compute_wait_rank_ms(ms);
    }
  }
  if (m.tp > 1 && !gemm_only) {
    *res.mutable_comm_alone_nccl() = ToProto(Summarize(figures.comm_nccl));
    *res.mutable_comm_alone_p2p() = ToProto(Summarize(figures.comm_p2p));
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
  const double exposed = figures.exposed_comm_ms;
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

v1::JobResult ToProto(const runner::JobReport& report) {
  v1::JobResult result;
  result.set_backend(report.backend);
  result.set_launch_gate(report.launch_gate);
  result.set_head_start(report.head_start);
  result.set_preheat_ms(report.preheat_ms);
  result.set_nccl_overlap_ctas(report.nccl_overlap_ctas);
  result.set_ranks_per_gpu(report.ranks_per_gpu);
  result.set_mesh_tp(report.mesh_tp);
  result.set_mesh_dp(report.mesh_dp);
  result.set_overlapd_version(report.overlapd_version);
  result.set_gpu(report.gpu);
  result.set_cuda_runtime(report.versions.cuda_runtime);
  result.set_cuda_driver(report.versions.cuda_driver);
  result.set_nccl(report.versions.nccl);
  result.set_cublas(report.versions.cublas);
  for (const auto& [name, value] : report.library_env) (*result.mutable_library_env())[name] = value;
  for (const OpMeasurement& op : report.ops) *result.add_ops() = ToProto(op);
  result.set_total_step_ms(report.total_step_ms);
  result.set_total_exposed_comm_ms(report.total_exposed_comm_ms);
  result.set_layer_note(report.layer_note);
  for (const FusionNote& note : report.fusions) {
    v1::Fusion* out = result.add_fusions();
    out->set_gemm(note.gemm);
    out->set_collective(note.collective);
    out->set_fused_type(note.fused_type);
    out->set_fused(note.fused);
    out->set_why_not(note.why_not);
  }
  if (!report.layer) return result;
  const runner::LayerStepReport& layer = *report.layer;
  *result.mutable_layer_step() = ToProto(layer.step);
  for (const runner::LayerDeferral& d : layer.deferrals) {
    v1::LayerDeferral* out = result.add_layer_deferrals();
    out->set_op(d.op);
    out->set_how(d.how);
    out->set_pieces(d.pieces);
    out->set_piece_bytes(d.piece_bytes);
    out->set_joined_before(d.joined_before);
    out->set_alone_ms(d.alone_ms);
    out->set_dispatched(d.dispatched);
    if (!d.dispatched) continue;
    out->set_ready_ms(d.ready_ms);
    out->set_first_chunk_ms(d.first_chunk_ms);
    out->set_finished_ms(d.finished_ms);
    out->set_worst_delay_ms(d.worst_delay_ms);
    out->set_bound_ms(d.bound_ms);
    out->set_chunks_yielded(d.chunks_yielded);
    out->set_chunks_forced(d.chunks_forced);
  }
  result.set_layer_scheduler(layer.scheduler);
  result.set_layer_captured(layer.captured);
  result.set_lanes(layer.lanes);
  result.set_layer_dispatch_iterations(layer.dispatch_iterations);
  for (const runner::LaneFigures& f : layer.lane_figures) {
    v1::LaneFigures* out = result.add_lane_figures();
    out->set_device(f.device);
    out->set_inversion_ms(f.inversion_ms);
    out->set_deferred_busy_ms(f.deferred_busy_ms);
  }
  for (const std::string& note : layer.scheduler_notes) result.add_scheduler_notes(note);
  if (layer.without_deferred) {
    *result.mutable_layer_step_without_deferred() = ToProto(*layer.without_deferred);
    result.set_layer_deferred_hidden_fraction(layer.deferred_hidden_fraction);
  }
  result.set_layer_exposed_comm_ms(layer.exposed_comm_ms);
  result.set_layer_activation_ms(layer.activation_ms);
  for (const std::string& id : layer.order) result.add_layer_order(id);
  for (const std::string& id : layer.deferred) result.add_layer_deferred(id);
  for (const std::string& id : layer.joined_before) result.add_layer_joined_before(id);
  if (layer.timeline) *result.mutable_layer_timeline() = ToProto(*layer.timeline);
  for (const runner::LayerChainCheck& c : layer.chains) {
    v1::LayerChainCheck* out = result.add_layer_chains();
    out->set_op(c.op);
    out->set_chain(c.chain);
    out->set_max_rel_error(c.max_rel_error);
    out->set_tolerance(c.tolerance);
  }
  return result;
}

absl::StatusOr<v1::JobResult> RunJobResult(engine::Engine& engine, const JobSpec& spec,
                                           const std::vector<int>& devices,
                                           const runner::RunHooks& hooks,
                                           const runner::ScheduleSource& source) {
  absl::StatusOr<runner::JobReport> report = runner::RunJob(engine, spec, devices, hooks, source);
  if (!report.ok()) return report.status();
  return ToProto(*report);
}

}  // namespace overlap::report
