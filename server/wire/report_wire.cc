#include "server/wire/report_wire.h"

#include <algorithm>
#include <utility>

namespace overlap::wire {
namespace {

template <typename T, typename Repeated>
std::vector<T> VectorOf(const Repeated& repeated) {
  return std::vector<T>(repeated.begin(), repeated.end());
}

template <typename T, typename Repeated>
void AddAll(const std::vector<T>& values, Repeated* out) {
  std::copy(values.begin(), values.end(), google::protobuf::RepeatedFieldBackInserter(out));
}

void SetOpSchedule(const runner::OpReport& op, v1::OpResult& out) {
  out.set_id(op.id);
  out.set_type(op.type);
  out.set_mode(op.mode);
  out.set_schedule(op.schedule);
  out.set_requested_mode(op.requested_mode);
  out.set_transport(op.transport);
  out.set_chunks(op.chunks);
  out.set_algorithm(op.algorithm);
  out.set_m(op.m);
  out.set_k(op.k);
  out.set_n(op.n);
  out.set_tp(op.tp);
  out.set_dtype(op.dtype);
  out.set_auto_reason(op.auto_reason);
  out.set_group(op.group);
  for (const runner::CandidateReport& c : op.candidates) {
    v1::CandidateTiming* t = out.add_candidates();
    t->set_schedule(c.schedule);
    t->set_best_ms(c.best_ms);
    t->set_runoff_ms(c.runoff_ms);
  }
}

void GetOpSchedule(const v1::OpResult& in, runner::OpReport& op) {
  op.id = in.id();
  op.type = in.type();
  op.mode = in.mode();
  op.schedule = in.schedule();
  op.requested_mode = in.requested_mode();
  op.transport = in.transport();
  op.chunks = in.chunks();
  op.algorithm = in.algorithm();
  op.m = in.m();
  op.k = in.k();
  op.n = in.n();
  op.tp = in.tp();
  op.dtype = in.dtype();
  op.auto_reason = in.auto_reason();
  op.group = in.group();
  for (const v1::CandidateTiming& c : in.candidates()) {
    op.candidates.push_back({c.schedule(), c.best_ms(), c.runoff_ms()});
  }
}

std::optional<Summary> OptionalOf(bool present, const v1::TimingStats& s) {
  if (!present) return std::nullopt;
  return FromProto(s);
}

v1::LayerDeferral DeferralToProto(const runner::LayerDeferral& d) {
  v1::LayerDeferral out;
  out.set_op(d.op);
  out.set_how(d.how);
  out.set_pieces(d.pieces);
  out.set_piece_bytes(d.piece_bytes);
  out.set_joined_before(d.joined_before);
  out.set_alone_ms(d.alone_ms);
  out.set_dispatched(d.dispatched);
  // Only the deferred lane's dispatch times its deferrals.
  if (!d.dispatched) return out;
  out.set_ready_ms(d.ready_ms);
  out.set_first_chunk_ms(d.first_chunk_ms);
  out.set_finished_ms(d.finished_ms);
  out.set_worst_delay_ms(d.worst_delay_ms);
  out.set_bound_ms(d.bound_ms);
  out.set_chunks_yielded(d.chunks_yielded);
  out.set_chunks_forced(d.chunks_forced);
  return out;
}

runner::LayerDeferral DeferralFromProto(const v1::LayerDeferral& in) {
  runner::LayerDeferral d;
  d.op = in.op();
  d.how = in.how();
  d.pieces = in.pieces();
  d.piece_bytes = in.piece_bytes();
  d.joined_before = in.joined_before();
  d.alone_ms = in.alone_ms();
  d.dispatched = in.dispatched();
  d.ready_ms = in.ready_ms();
  d.first_chunk_ms = in.first_chunk_ms();
  d.finished_ms = in.finished_ms();
  d.worst_delay_ms = in.worst_delay_ms();
  d.bound_ms = in.bound_ms();
  d.chunks_yielded = in.chunks_yielded();
  d.chunks_forced = in.chunks_forced();
  return d;
}

void SetLayerLists(const runner::LayerStepReport& layer, v1::JobResult& out) {
  for (const runner::LayerDeferral& d : layer.deferrals)
    *out.add_layer_deferrals() = DeferralToProto(d);
  for (const runner::LaneFigures& f : layer.lane_figures) {
    v1::LaneFigures* lane = out.add_lane_figures();
    lane->set_device(f.device);
    lane->set_inversion_ms(f.inversion_ms);
    lane->set_deferred_busy_ms(f.deferred_busy_ms);
  }
  for (const runner::LayerChainCheck& c : layer.chains) {
    v1::LayerChainCheck* check = out.add_layer_chains();
    check->set_op(c.op);
    check->set_chain(c.chain);
    check->set_max_rel_error(c.max_rel_error);
    check->set_tolerance(c.tolerance);
  }
  AddAll(layer.scheduler_notes, out.mutable_scheduler_notes());
  AddAll(layer.order, out.mutable_layer_order());
  AddAll(layer.deferred, out.mutable_layer_deferred());
  AddAll(layer.joined_before, out.mutable_layer_joined_before());
}

void SetLayer(const runner::LayerStepReport& layer, v1::JobResult& out) {
  *out.mutable_layer_step() = ToProto(layer.step);
  out.set_layer_scheduler(layer.scheduler);
  out.set_layer_captured(layer.captured);
  out.set_lanes(layer.lanes);
  out.set_layer_dispatch_iterations(layer.dispatch_iterations);
  if (layer.without_deferred) {
    *out.mutable_layer_step_without_deferred() = ToProto(*layer.without_deferred);
  }
  out.set_layer_deferred_hidden_fraction(layer.deferred_hidden_fraction);
  out.set_layer_exposed_comm_ms(layer.exposed_comm_ms);
  out.set_layer_activation_ms(layer.activation_ms);
  if (layer.timeline) *out.mutable_layer_timeline() = ToProto(*layer.timeline);
  SetLayerLists(layer, out);
}

runner::LayerStepReport LayerOf(const v1::JobResult& in) {
  runner::LayerStepReport layer;
  layer.step = FromProto(in.layer_step());
  layer.scheduler = in.layer_scheduler();
  layer.captured = in.layer_captured();
  layer.lanes = in.lanes();
  layer.dispatch_iterations = in.layer_dispatch_iterations();
  if (in.has_layer_step_without_deferred()) {
    layer.without_deferred = FromProto(in.layer_step_without_deferred());
  }
  layer.deferred_hidden_fraction = in.layer_deferred_hidden_fraction();
  layer.exposed_comm_ms = in.layer_exposed_comm_ms();
  layer.activation_ms = in.layer_activation_ms();
  if (in.has_layer_timeline()) layer.timeline = FromProto(in.layer_timeline());
  for (const v1::LayerDeferral& d : in.layer_deferrals())
    layer.deferrals.push_back(DeferralFromProto(d));
  for (const v1::LaneFigures& f : in.lane_figures()) {
    layer.lane_figures.push_back({f.device(), f.inversion_ms(), f.deferred_busy_ms()});
  }
  for (const v1::LayerChainCheck& c : in.layer_chains()) {
    layer.chains.push_back({c.op(), c.chain(), c.max_rel_error(), c.tolerance()});
  }
  layer.scheduler_notes = VectorOf<std::string>(in.scheduler_notes());
  layer.order = VectorOf<std::string>(in.layer_order());
  layer.deferred = VectorOf<std::string>(in.layer_deferred());
  layer.joined_before = VectorOf<std::string>(in.layer_joined_before());
  return layer;
}

void SetRunInfo(const runner::JobReport& report, v1::JobResult& out) {
  out.set_backend(report.backend);
  out.set_launch_gate(report.launch_gate);
  out.set_head_start(report.head_start);
  out.set_preheat_ms(report.preheat_ms);
  out.set_nccl_overlap_ctas(report.nccl_overlap_ctas);
  out.set_ranks_per_gpu(report.ranks_per_gpu);
  out.set_mesh_tp(report.mesh_tp);
  out.set_mesh_dp(report.mesh_dp);
  out.set_overlapd_version(report.overlapd_version);
  out.set_gpu(report.gpu);
  out.set_cuda_runtime(report.versions.cuda_runtime);
  out.set_cuda_driver(report.versions.cuda_driver);
  out.set_nccl(report.versions.nccl);
  out.set_cublas(report.versions.cublas);
  for (const auto& [name, value] : report.library_env) (*out.mutable_library_env())[name] = value;
  for (const FusionNote& note : report.fusions) {
    v1::Fusion* fusion = out.add_fusions();
    fusion->set_gemm(note.gemm);
    fusion->set_collective(note.collective);
    fusion->set_fused_type(note.fused_type);
    fusion->set_fused(note.fused);
    fusion->set_why_not(note.why_not);
  }
}

void GetRunInfo(const v1::JobResult& in, runner::JobReport& report) {
  report.backend = in.backend();
  report.launch_gate = in.launch_gate();
  report.head_start = in.head_start();
  report.preheat_ms = in.preheat_ms();
  report.nccl_overlap_ctas = in.nccl_overlap_ctas();
  report.ranks_per_gpu = in.ranks_per_gpu();
  report.mesh_tp = in.mesh_tp();
  report.mesh_dp = in.mesh_dp();
  report.overlapd_version = in.overlapd_version();
  report.gpu = in.gpu();
  report.versions = {in.cuda_runtime(), in.cuda_driver(), in.nccl(), in.cublas()};
  report.library_env = {in.library_env().begin(), in.library_env().end()};
  for (const v1::Fusion& f : in.fusions()) {
    report.fusions.push_back({f.gemm(), f.collective(), f.fused_type(), f.fused(), f.why_not()});
  }
}

void SetNodes(const runner::JobReport& report, v1::JobResult& out) {
  for (const runner::NodeReport& node : report.nodes) {
    v1::NodeResult* line = out.add_node_results();
    line->set_node(node.node);
    line->set_node_index(node.node_index);
    line->set_part_id(node.part_id);
    line->set_first_rank(node.first_rank);
    line->set_ranks(node.ranks);
    line->set_total_step_ms(node.total_step_ms);
    line->set_layer_step_ms(node.layer_step_ms);
    line->set_slowest_rank(node.slowest_rank);
    line->set_backend(node.backend);
    line->set_gpu(node.gpu);
  }
  out.set_slowest_rank(report.slowest_rank);
  out.set_slowest_node(report.slowest_node);
  out.set_inter_node_busbw_gbps(report.inter_node_busbw_gbps);
}

void GetNodes(const v1::JobResult& in, runner::JobReport& report) {
  for (const v1::NodeResult& n : in.node_results()) {
    report.nodes.push_back({n.node(), n.node_index(), n.part_id(), n.first_rank(), n.ranks(),
                            n.total_step_ms(), n.layer_step_ms(), n.slowest_rank(), n.backend(),
                            n.gpu()});
  }
  report.slowest_rank = in.slowest_rank();
  report.slowest_node = in.slowest_node();
  report.inter_node_busbw_gbps = in.inter_node_busbw_gbps();
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

Summary FromProto(const v1::TimingStats& s) {
  return Summary{s.median_ms(), s.min_ms(), s.max_ms(), s.samples()};
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

runner::Progress FromProto(const v1::Progress& p) {
  return runner::Progress{p.op_index(), p.op_count(),  p.op_id(),
                          p.phase(),    p.iteration(), p.iterations()};
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

runner::Timeline FromProto(const v1::Timeline& timeline) {
  runner::Timeline out;
  out.step_ms = timeline.step_ms();
  out.enqueued_not_replayed = timeline.enqueued_not_replayed();
  for (const v1::TimelineSpan& s : timeline.spans()) {
    out.spans.push_back({s.op(), s.rank(), s.lane(), s.kind(), s.name(), s.start_ms(), s.end_ms()});
  }
  return out;
}

v1::OpResult ToProto(const runner::OpReport& op) {
  v1::OpResult out;
  SetOpSchedule(op, out);
  *out.mutable_step() = ToProto(op.step);
  *out.mutable_gemm_alone() = ToProto(op.gemm_alone);
  if (op.comm_alone) *out.mutable_comm_alone() = ToProto(*op.comm_alone);
  if (op.comm_alone_nccl) *out.mutable_comm_alone_nccl() = ToProto(*op.comm_alone_nccl);
  if (op.comm_alone_p2p) *out.mutable_comm_alone_p2p() = ToProto(*op.comm_alone_p2p);
  if (op.gemm_beside_comm) *out.mutable_gemm_beside_comm() = ToProto(*op.gemm_beside_comm);
  out.set_gemm_slowdown(op.gemm_slowdown);
  AddAll(op.gemm_alone_rank_ms, out.mutable_gemm_alone_rank_ms());
  out.set_host_enqueue_ms(op.host_enqueue_ms);
  out.set_graph_replay(op.graph_replay);
  if (op.timeline) *out.mutable_timeline() = ToProto(*op.timeline);
  AddAll(op.compute_wait_rank_ms, out.mutable_compute_wait_rank_ms());
  AddAll(op.group_step_ms, out.mutable_group_step_ms());
  out.set_slowest_group(op.slowest_group);
  out.set_exposed_comm_ms(op.exposed_comm_ms);
  out.set_hidden_fraction(op.hidden_fraction);
  out.set_ideal_ms(op.ideal_ms);
  out.set_tflops(op.tflops);
  out.set_algbw_gbps(op.algbw_gbps);
  out.set_busbw_gbps(op.busbw_gbps);
  out.set_tolerance(op.tolerance);
  out.set_verified(op.verified);
  out.set_max_rel_error(op.max_rel_error);
  out.set_spans_nodes(op.spans_nodes);
  return out;
}

runner::OpReport FromProto(const v1::OpResult& in) {
  runner::OpReport op;
  GetOpSchedule(in, op);
  op.step = FromProto(in.step());
  op.gemm_alone = FromProto(in.gemm_alone());
  op.comm_alone = OptionalOf(in.has_comm_alone(), in.comm_alone());
  op.comm_alone_nccl = OptionalOf(in.has_comm_alone_nccl(), in.comm_alone_nccl());
  op.comm_alone_p2p = OptionalOf(in.has_comm_alone_p2p(), in.comm_alone_p2p());
  op.gemm_beside_comm = OptionalOf(in.has_gemm_beside_comm(), in.gemm_beside_comm());
  op.gemm_slowdown = in.gemm_slowdown();
  op.gemm_alone_rank_ms = VectorOf<double>(in.gemm_alone_rank_ms());
  op.host_enqueue_ms = in.host_enqueue_ms();
  op.graph_replay = in.graph_replay();
  if (in.has_timeline()) op.timeline = FromProto(in.timeline());
  op.compute_wait_rank_ms = VectorOf<double>(in.compute_wait_rank_ms());
  op.group_step_ms = VectorOf<double>(in.group_step_ms());
  op.slowest_group = in.slowest_group();
  op.exposed_comm_ms = in.exposed_comm_ms();
  op.hidden_fraction = in.hidden_fraction();
  op.ideal_ms = in.ideal_ms();
  op.tflops = in.tflops();
  op.algbw_gbps = in.algbw_gbps();
  op.busbw_gbps = in.busbw_gbps();
  op.tolerance = in.tolerance();
  op.verified = in.verified();
  op.max_rel_error = in.max_rel_error();
  op.spans_nodes = in.spans_nodes();
  return op;
}

v1::JobResult ToProto(const runner::JobReport& report) {
  v1::JobResult out;
  SetRunInfo(report, out);
  for (const runner::OpReport& op : report.ops) *out.add_ops() = ToProto(op);
  out.set_total_step_ms(report.total_step_ms);
  out.set_total_exposed_comm_ms(report.total_exposed_comm_ms);
  out.set_layer_note(report.layer_note);
  if (report.layer) SetLayer(*report.layer, out);
  SetNodes(report, out);
  return out;
}

runner::JobReport FromProto(const v1::JobResult& in) {
  runner::JobReport report;
  GetRunInfo(in, report);
  for (const v1::OpResult& op : in.ops()) report.ops.push_back(FromProto(op));
  report.total_step_ms = in.total_step_ms();
  report.total_exposed_comm_ms = in.total_exposed_comm_ms();
  report.layer_note = in.layer_note();
  // ToProto always writes a layer's step: it is present exactly with a layer.
  if (in.has_layer_step()) report.layer = LayerOf(in);
  GetNodes(in, report);
  return report;
}

}  // namespace overlap::wire
