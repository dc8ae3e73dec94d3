#include "server/wire/report_wire.h"

#include <algorithm>
#include <utility>

#include "server/wire/same_name_fields.h"

// clang-format off
#define OP_SCHEDULE_FIELDS(F)                                                         \
  F(id) F(type) F(mode) F(schedule) F(requested_mode) F(transport) F(chunks)          \
  F(algorithm) F(m) F(k) F(n) F(tp) F(dtype) F(auto_reason) F(group) F(edge)
#define OP_FIGURE_FIELDS(F)                                                           \
  F(gemm_slowdown) F(host_enqueue_ms) F(graph_replay) F(slowest_group)                \
  F(exposed_comm_ms) F(hidden_fraction) F(ideal_ms) F(tflops) F(algbw_gbps)           \
  F(busbw_gbps) F(tolerance) F(verified) F(max_rel_error) F(spans_nodes)
#define DEFERRAL_FIELDS(F)                                                            \
  F(op) F(how) F(pieces) F(piece_bytes) F(joined_before) F(alone_ms) F(dispatched)
// Only the deferred lane's dispatch times its deferrals.
#define DISPATCH_FIELDS(F)                                                            \
  F(ready_ms) F(first_chunk_ms) F(finished_ms) F(worst_delay_ms) F(bound_ms)          \
  F(chunks_yielded) F(chunks_forced)
#define RUN_INFO_FIELDS(F)                                                            \
  F(backend) F(launch_gate) F(head_start) F(preheat_ms) F(nccl_overlap_ctas)          \
  F(ranks_per_gpu) F(mesh_tp) F(mesh_dp) F(overlapd_version) F(gpu)
#define JOB_FIGURE_FIELDS(F)                                                          \
  F(total_step_ms) F(total_exposed_comm_ms) F(layer_note) F(slowest_rank)             \
  F(slowest_node) F(inter_node_busbw_gbps)
#define PROGRESS_FIELDS(F) F(op_index) F(op_count) F(op_id) F(phase) F(iteration) F(iterations)
#define CANDIDATE_FIELDS(F) F(schedule) F(best_ms) F(runoff_ms)
#define LANE_FIELDS(F) F(device) F(inversion_ms) F(deferred_busy_ms)
#define CHAIN_FIELDS(F) F(op) F(chain) F(max_rel_error) F(tolerance)
#define FUSION_FIELDS(F) F(gemm) F(collective) F(fused_type) F(fused) F(why_not)
#define SPAN_FIELDS(F) F(op) F(rank) F(lane) F(kind) F(name) F(start_ms) F(end_ms)
#define ENERGY_FIELDS(F)                                                              \
  F(step_joules) F(step_watts) F(serial_valid) F(serial_joules) F(serial_watts)       \
  F(serial_ms) F(note) F(window_s) F(steps) F(step_error) F(serial_error) F(counter_period_ms)
#define NODE_FIELDS(F)                                                                \
  F(node) F(node_index) F(part_id) F(first_rank) F(ranks) F(total_step_ms)            \
  F(layer_step_ms) F(slowest_rank) F(backend) F(gpu)
// clang-format on

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

// The elements of repeated fields, each way.
void Copy(const runner::CandidateReport& in, v1::CandidateTiming& out) {
  CANDIDATE_FIELDS(WIRE_SET)
}
void Copy(const v1::CandidateTiming& in, runner::CandidateReport& out) {
  CANDIDATE_FIELDS(WIRE_GET)
}
void Copy(const runner::LaneFigures& in, v1::LaneFigures& out) { LANE_FIELDS(WIRE_SET) }
void Copy(const v1::LaneFigures& in, runner::LaneFigures& out) { LANE_FIELDS(WIRE_GET) }
void Copy(const runner::LayerChainCheck& in, v1::LayerChainCheck& out) { CHAIN_FIELDS(WIRE_SET) }
void Copy(const v1::LayerChainCheck& in, runner::LayerChainCheck& out) { CHAIN_FIELDS(WIRE_GET) }
void Copy(const FusionNote& in, v1::Fusion& out) { FUSION_FIELDS(WIRE_SET) }
void Copy(const v1::Fusion& in, FusionNote& out) { FUSION_FIELDS(WIRE_GET) }
void Copy(const runner::TimelineSpan& in, v1::TimelineSpan& out) { SPAN_FIELDS(WIRE_SET) }
void Copy(const v1::TimelineSpan& in, runner::TimelineSpan& out) { SPAN_FIELDS(WIRE_GET) }
void Copy(const runner::NodeReport& in, v1::NodeResult& out) { NODE_FIELDS(WIRE_SET) }
void Copy(const v1::NodeResult& in, runner::NodeReport& out) { NODE_FIELDS(WIRE_GET) }
void Copy(const runner::LayerDeferral& in, v1::LayerDeferral& out) {
  DEFERRAL_FIELDS(WIRE_SET)
  if (in.dispatched) {
    DISPATCH_FIELDS(WIRE_SET)
  }
}
void Copy(const v1::LayerDeferral& in, runner::LayerDeferral& out) {
  DEFERRAL_FIELDS(WIRE_GET)
  DISPATCH_FIELDS(WIRE_GET)
}

// Energy figures travel as a message present exactly where they are valid;
// joules per TFLOP sits beside them in the report.
void SetEnergy(const runner::EnergyFigures& in, double joules_per_tflop, v1::Energy& out) {
  ENERGY_FIELDS(WIRE_SET)
  out.set_joules_per_tflop(joules_per_tflop);
}
void GetEnergy(const v1::Energy& in, runner::EnergyFigures& out, double& joules_per_tflop) {
  out.valid = true;
  ENERGY_FIELDS(WIRE_GET)
  joules_per_tflop = in.joules_per_tflop();
}

// Each element of `from` appended to `to`, through Copy.
template <typename Core, typename Message>
void CopyAll(const std::vector<Core>& from, google::protobuf::RepeatedPtrField<Message>* to) {
  for (const Core& core : from) Copy(core, *to->Add());
}
template <typename Message, typename Core>
void CopyAll(const google::protobuf::RepeatedPtrField<Message>& from, std::vector<Core>& to) {
  for (const Message& message : from) Copy(message, to.emplace_back());
}

std::optional<Summary> OptionalOf(bool present, const v1::TimingStats& s) {
  if (!present) return std::nullopt;
  return FromProto(s);
}

void SetLayerLists(const runner::LayerStepReport& layer, v1::JobResult& out) {
  CopyAll(layer.deferrals, out.mutable_layer_deferrals());
  CopyAll(layer.lane_figures, out.mutable_lane_figures());
  CopyAll(layer.chains, out.mutable_layer_chains());
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
  if (layer.energy.valid) {
    SetEnergy(layer.energy, layer.joules_per_tflop, *out.mutable_layer_energy());
  }
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
  if (in.has_layer_energy()) GetEnergy(in.layer_energy(), layer.energy, layer.joules_per_tflop);
  CopyAll(in.layer_deferrals(), layer.deferrals);
  CopyAll(in.lane_figures(), layer.lane_figures);
  CopyAll(in.layer_chains(), layer.chains);
  layer.scheduler_notes = VectorOf<std::string>(in.scheduler_notes());
  layer.order = VectorOf<std::string>(in.layer_order());
  layer.deferred = VectorOf<std::string>(in.layer_deferred());
  layer.joined_before = VectorOf<std::string>(in.layer_joined_before());
  return layer;
}

void SetRunInfo(const runner::JobReport& in, v1::JobResult& out) {
  RUN_INFO_FIELDS(WIRE_SET)
  out.set_cuda_runtime(in.versions.cuda_runtime);
  out.set_cuda_driver(in.versions.cuda_driver);
  out.set_nccl(in.versions.nccl);
  out.set_cublas(in.versions.cublas);
  for (const auto& [name, value] : in.library_env) (*out.mutable_library_env())[name] = value;
  CopyAll(in.fusions, out.mutable_fusions());
}

void GetRunInfo(const v1::JobResult& in, runner::JobReport& out) {
  RUN_INFO_FIELDS(WIRE_GET)
  out.versions = {in.cuda_runtime(), in.cuda_driver(), in.nccl(), in.cublas()};
  out.library_env = {in.library_env().begin(), in.library_env().end()};
  CopyAll(in.fusions(), out.fusions);
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

v1::Progress ToProto(const runner::Progress& in) {
  v1::Progress out;
  PROGRESS_FIELDS(WIRE_SET)
  return out;
}

runner::Progress FromProto(const v1::Progress& in) {
  runner::Progress out;
  PROGRESS_FIELDS(WIRE_GET)
  return out;
}

v1::Timeline ToProto(const runner::Timeline& timeline) {
  v1::Timeline out;
  out.set_step_ms(timeline.step_ms);
  out.set_enqueued_not_replayed(timeline.enqueued_not_replayed);
  CopyAll(timeline.spans, out.mutable_spans());
  return out;
}

runner::Timeline FromProto(const v1::Timeline& timeline) {
  runner::Timeline out;
  out.step_ms = timeline.step_ms();
  out.enqueued_not_replayed = timeline.enqueued_not_replayed();
  CopyAll(timeline.spans(), out.spans);
  return out;
}

v1::OpResult ToProto(const runner::OpReport& in) {
  v1::OpResult out;
  OP_SCHEDULE_FIELDS(WIRE_SET)
  OP_FIGURE_FIELDS(WIRE_SET)
  CopyAll(in.candidates, out.mutable_candidates());
  *out.mutable_step() = ToProto(in.step);
  *out.mutable_gemm_alone() = ToProto(in.gemm_alone);
  if (in.comm_alone) *out.mutable_comm_alone() = ToProto(*in.comm_alone);
  if (in.comm_alone_nccl) *out.mutable_comm_alone_nccl() = ToProto(*in.comm_alone_nccl);
  if (in.comm_alone_p2p) *out.mutable_comm_alone_p2p() = ToProto(*in.comm_alone_p2p);
  if (in.gemm_beside_comm) *out.mutable_gemm_beside_comm() = ToProto(*in.gemm_beside_comm);
  AddAll(in.gemm_alone_rank_ms, out.mutable_gemm_alone_rank_ms());
  if (in.timeline) *out.mutable_timeline() = ToProto(*in.timeline);
  AddAll(in.compute_wait_rank_ms, out.mutable_compute_wait_rank_ms());
  AddAll(in.group_step_ms, out.mutable_group_step_ms());
  if (in.energy.valid) SetEnergy(in.energy, in.joules_per_tflop, *out.mutable_energy());
  return out;
}

runner::OpReport FromProto(const v1::OpResult& in) {
  runner::OpReport out;
  OP_SCHEDULE_FIELDS(WIRE_GET)
  OP_FIGURE_FIELDS(WIRE_GET)
  CopyAll(in.candidates(), out.candidates);
  out.step = FromProto(in.step());
  out.gemm_alone = FromProto(in.gemm_alone());
  out.comm_alone = OptionalOf(in.has_comm_alone(), in.comm_alone());
  out.comm_alone_nccl = OptionalOf(in.has_comm_alone_nccl(), in.comm_alone_nccl());
  out.comm_alone_p2p = OptionalOf(in.has_comm_alone_p2p(), in.comm_alone_p2p());
  out.gemm_beside_comm = OptionalOf(in.has_gemm_beside_comm(), in.gemm_beside_comm());
  out.gemm_alone_rank_ms = VectorOf<double>(in.gemm_alone_rank_ms());
  if (in.has_timeline()) out.timeline = FromProto(in.timeline());
  out.compute_wait_rank_ms = VectorOf<double>(in.compute_wait_rank_ms());
  out.group_step_ms = VectorOf<double>(in.group_step_ms());
  if (in.has_energy()) GetEnergy(in.energy(), out.energy, out.joules_per_tflop);
  return out;
}

v1::JobResult ToProto(const runner::JobReport& in) {
  v1::JobResult out;
  SetRunInfo(in, out);
  JOB_FIGURE_FIELDS(WIRE_SET)
  for (const runner::OpReport& op : in.ops) *out.add_ops() = ToProto(op);
  if (in.layer) SetLayer(*in.layer, out);
  CopyAll(in.nodes, out.mutable_node_results());
  return out;
}

runner::JobReport FromProto(const v1::JobResult& in) {
  runner::JobReport out;
  GetRunInfo(in, out);
  JOB_FIGURE_FIELDS(WIRE_GET)
  for (const v1::OpResult& op : in.ops()) out.ops.push_back(FromProto(op));
  // ToProto always writes a layer's step: it is present exactly with a layer.
  if (in.has_layer_step()) out.layer = LayerOf(in);
  CopyAll(in.node_results(), out.nodes);
  return out;
}

}  // namespace overlap::wire
