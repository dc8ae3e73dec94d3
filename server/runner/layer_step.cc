#include "server/runner/layer_step.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/ops/chain_reference.h"
#include "server/ops/op_context.h"
#include "server/ops/reference.h"
#include "server/runner/dynamic_step.h"
#include "server/runner/layer_members.h"
#include "server/runner/op_phases.h"
#include "server/runner/op_run.h"
#include "server/runner/traced_iteration.h"
#include "server/runner/tuning_cache.h"

namespace overlap::runner {

using ops::BuffersFor;
using ops::EnqueueOp;
using ops::FillInputs;
using ops::OpContext;
using ops::OutputTolerance;
using ops::PoisonOutputs;
using ops::Schedule;
using ops::Verification;
using ops::VerifyOutputs;
namespace {

// The schedule the op ran alone, which it runs in the step too.
Schedule ScheduleOf(const OpMeasurement& m) {
  Schedule schedule = m.choice.schedule;
  schedule.chunks = std::max(1, schedule.chunks);
  return schedule;
}

// One layer iteration: each op on its streams in order; a deferred op starts
// on its side streams once the main streams reach it (a chunked one piece by
// piece, one after each op that follows), and the main streams wait for it
// before the op it joins before, or at the end. Without `with_deferred` the
// deferred ops are left out: the step they would add to, to tell how much of
// them hid. `tracer`, when set, labels the spans of each op with its id.
absl::Status EnqueueLayer(std::vector<Member>& members, OpContext& main,
                          TimelineEngine* tracer = nullptr, bool with_deferred = true) {
  const MainStreams streams = MainStreamsOf(main);
  for (Member& m : members) m.sent = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    Member& m = members[i];
    if (m.deferred && !with_deferred) continue;
    if (tracer != nullptr) tracer->SetLabel(m.op.id);
    if (with_deferred) RETURN_IF_ERROR(JoinBefore(members, m.op.id, streams));
    if (m.deferred) {
      RETURN_IF_ERROR(SendDeferred(m, streams));
      continue;
    }
    RETURN_IF_ERROR(EnqueueWiredInput(m));
    RETURN_IF_ERROR(EnqueueOp(*m.ctx, m.schedule));
    if (!with_deferred) continue;
    // After each op on the main streams, every chunked op sent before it sends its next piece.
    for (size_t j = 0; j < i; ++j) {
      Member& earlier = members[j];
      if (!earlier.deferred || earlier.pieces.empty() || !Unsent(earlier)) continue;
      if (tracer != nullptr) tracer->SetLabel(earlier.op.id);
      RETURN_IF_ERROR(SendDeferred(earlier, streams));
    }
  }
  if (!with_deferred) return absl::OkStatus();
  return JoinBefore(members, "", streams);
}

// scheduler: dynamic: the iterations the dispatch figures come from, at most.
constexpr int kDispatchIterations = 5;
// Iterations that time the activation passes alone: short elementwise work,
// whose median settles in a few.
constexpr int kActivationIterations = 10;

// Each member's output on each local rank to `hooks.on_layer_output`, where
// one is set (tests comparing two runs).
absl::Status HandOutOutputs(std::vector<Member>& members, const RunHooks& hooks) {
  if (!hooks.on_layer_output) return absl::OkStatus();
  for (Member& m : members) {
    OpContext& ctx = *m.ctx;
    const LocalShapes& shapes = ctx.shapes();
    for (int r = 0; r < ctx.tp(); ++r) {
      const ops::RankState& rank = ctx.rank(r);
      if (!ctx.engine().IsLocalDevice(rank.device)) continue;
      std::vector<uint8_t> y(static_cast<size_t>(shapes.y_rows * shapes.y_cols) *
                             DTypeSize(ctx.DTypeOf(rank.y)));
      RETURN_IF_ERROR(ctx.engine().CopyToHost(
          y.data(), ctx.Rows(rank.y, 0, shapes.y_rows, shapes.y_cols), rank.device));
      hooks.on_layer_output(ctx.op().id, r, std::move(y));
    }
  }
  return absl::OkStatus();
}

// Whether any op of the step moves data between devices: one with a
// collective over a group of two or more. At tp 1 none does, and no part of
// the step is communication.
bool Communicates(const std::vector<PlannedOp>& members, const JobSpec& spec, int device_count) {
  return std::any_of(members.begin(), members.end(), [&](const PlannedOp& m) {
    return !IsGemmOnly(m.op.type) && GroupSize(spec.mesh, m.op.group, device_count) > 1;
  });
}

// The step's activation passes alone (each wired input made from its
// producer's output on the main streams, as the step makes it), timed as the
// step is; 0 when no op on the main streams reads another's output. They are
// neither GEMM nor communication: the exposed communication leaves them out.
absl::StatusOr<double> TimeActivationPasses(OpRun& run, std::vector<Member>& members,
                                            int iterations) {
  std::vector<Member*> wired;
  for (Member& m : members) {
    if (!m.deferred && m.input_from != nullptr && EdgeRunsAPass(m.edge)) wired.push_back(&m);
  }
  if (wired.empty()) return 0.0;
  ASSIGN_OR_RETURN(const TimedRun passes,
                   run.Timed("activations", 1, iterations, [&]() -> absl::Status {
                     for (Member* m : wired) RETURN_IF_ERROR(EnqueueWiredInput(*m));
                     return absl::OkStatus();
                   }));
  return Summarize(passes.times).median;
}

}  // namespace

std::vector<double> BesideGemmsFactors(const engine::Engine& engine, const JobSpec& spec,
                                       const std::vector<int>& devices,
                                       const std::vector<Transport>& transports,
                                       TuningCache* tuning_cache) {
  std::vector<double> factors(spec.ops.size(), kBesideGemmsFactor);
  if (tuning_cache == nullptr || devices.empty()) return factors;
  const int device_count = static_cast<int>(devices.size());
  // Each group size's calibration, looked up once.
  std::map<int, absl::StatusOr<planner::Calibration>> by_ranks;
  for (size_t i = 0; i < spec.ops.size() && i < transports.size(); ++i) {
    if (!IsCollectiveOnly(spec.ops[i].type)) continue;
    const int ranks = GroupSize(spec.mesh, spec.ops[i].group, device_count);
    auto it = by_ranks.find(ranks);
    if (it == by_ranks.end()) {
      it = by_ranks.emplace(ranks, MatchingCalibration(*tuning_cache, engine, devices[0], ranks))
               .first;
    }
    if (!it->second.ok()) continue;
    const auto slowdown = it->second->gemm_slowdown.find(transports[i]);
    if (slowdown != it->second->gemm_slowdown.end() && slowdown->second > 0) {
      factors[i] = slowdown->second;
    }
  }
  return factors;
}

std::string ChainName(const JobSpec& spec, int index) {
  std::string name = spec.ops[index].id;
  for (const OpSpec* op = &spec.ops[index]; !op->input.empty();) {
    const std::string arrow = op->activation == Activation::kNone
                                  ? " -> "
                                  : absl::StrCat(" -", ActivationName(op->activation), "-> ");
    name = absl::StrCat(op->input, arrow, name);
    const OpSpec* from = nullptr;
    for (const OpSpec& other : spec.ops) {
      if (other.id == op->input) from = &other;
    }
    if (from == nullptr) break;
    op = from;
  }
  return name;
}

namespace {

// An fp8 op that reads another's output reads it with the chain's scale.
absl::Status UseChainScale(OpContext& ctx) {
  if (ctx.op().input.empty()) return absl::OkStatus();
  for (int r = 0; r < ctx.tp(); ++r) {
    if (ctx.rank(r).scales == engine::kNoBuffer) continue;
    RETURN_IF_ERROR(ctx.engine().FillConstant(ctx.rank(r).compute, ctx.ScaleOf(r, 0), DType::kF32,
                                              kChainFp8Dequant));
  }
  return absl::OkStatus();
}

// In a job that spans daemons every node plans the same step or their
// collectives pair up wrongly: the plan (the layer order, where deferred
// all-reduces are joined) follows the ops' times alone, which each node
// measured on its own ranks. So they agree on one set first: every rank's,
// summed by an all-reduce over every device and averaged, the same bits on
// every node. A job on one daemon keeps its own.
absl::Status AgreeAcrossDaemons(engine::Engine& engine, const std::vector<int>& devices,
                                std::vector<double>* times) {
  if (!SpansDaemons(engine, devices) || times->empty()) return absl::OkStatus();
  const size_t bytes = times->size() * sizeof(float);
  std::vector<float> mine(times->begin(), times->end());
  engine::CollectiveArgs args;
  args.dtype = DType::kF32;
  args.count = times->size();
  std::vector<engine::BufferId> buffers;
  absl::Cleanup free = [&] {
    for (engine::BufferId b : buffers) engine.Free(b);
  };
  for (int device : devices) {
    ASSIGN_OR_RETURN(const engine::BufferId buffer, engine.Allocate(device, bytes));
    buffers.push_back(buffer);
    const engine::BufferRef ref{buffer, 0, bytes};
    if (engine.IsLocalDevice(device))
      RETURN_IF_ERROR(engine.CopyFromHost(ref, device, mine.data()));
    args.ranks.push_back(
        engine::RankBuffers{device, engine.GetStream(device, engine::StreamRole::kComm), ref, ref});
  }
  RETURN_IF_ERROR(engine.AllReduce(args));
  RETURN_IF_ERROR(engine.Synchronize(devices));
  for (size_t i = 0; i < devices.size(); ++i) {
    if (!engine.IsLocalDevice(devices[i])) continue;
    RETURN_IF_ERROR(engine.CopyToHost(mine.data(), args.ranks[i].recv, devices[i]));
    break;
  }
  for (size_t i = 0; i < times->size(); ++i) {
    (*times)[i] = static_cast<double>(mine[i]) / static_cast<double>(devices.size());
  }
  return absl::OkStatus();
}

// The figures every node plans from, by spec index: each op's schedule and
// time alone from its own run (`measured` follows `order`), its collective's
// factor beside the GEMM ops; the times and factors in one vector that every
// node of a job spanning daemons agrees on.
absl::StatusOr<PlanFigures> AgreedFigures(engine::Engine& engine, const JobSpec& spec,
                                          const std::vector<int>& devices,
                                          const std::vector<int>& order,
                                          const std::vector<OpMeasurement>& measured,
                                          TuningCache* tuning_cache) {
  const size_t n = spec.ops.size();
  PlanFigures figures;
  figures.schedules.resize(n);
  std::vector<double> agreed(2 * n);
  std::vector<Transport> transports(n, Transport::kNccl);
  for (size_t i = 0; i < order.size() && i < measured.size(); ++i) {
    agreed[order[i]] = FiguresOf(measured[i]).step.median;
    figures.schedules[order[i]] = ScheduleOf(measured[i]);
    transports[order[i]] = figures.schedules[order[i]].transport;
  }
  const std::vector<double> factors =
      BesideGemmsFactors(engine, spec, devices, transports, tuning_cache);
  const auto half = static_cast<std::ptrdiff_t>(n);
  std::copy(factors.begin(), factors.end(), agreed.begin() + half);
  RETURN_IF_ERROR(AgreeAcrossDaemons(engine, devices, &agreed));
  figures.alone_ms.assign(agreed.begin(), agreed.begin() + half);
  figures.beside_gemms.assign(agreed.begin() + half, agreed.end());
  return figures;
}

// The step as it runs: the plan's ops with their contexts, and how one
// iteration of it is enqueued.
struct RunningStep {
  std::vector<Member> members;  // stay where they are: input_from points into them
  std::vector<int> devices;
  int timed_by = 0;
  bool dynamic = false;
  double bound_ms = 0;
  // Timed by replaying one captured graph: no schedule uses NCCL, and not
  // dispatched at run time (enqueued live, never captured, never gated).
  bool replays = false;
  engine::DeviceLanes* lanes = nullptr;  // the node's, beside sessions (RunHooks::lanes)

  OpContext& main() { return *members[timed_by].ctx; }
  absl::Status Enqueue(TimelineEngine* tracer = nullptr) {
    if (dynamic) return EnqueueLayerDynamic(members, main(), bound_ms, tracer, lanes).status();
    return EnqueueLayer(members, main(), tracer);
  }
};

// Each planned op's context, its input wired to its producer's output;
// RESOURCE_EXHAUSTED when the buffers of every op do not fit at once.
absl::StatusOr<RunningStep> CreateMembers(engine::Engine& engine, const JobSpec& spec,
                                          const std::vector<int>& devices, const LayerPlan& plan) {
  RunningStep step{std::vector<Member>(plan.ops.size()),
                   devices,
                   plan.timed_by,
                   spec.scheduler == Scheduler::kDynamic,
                   spec.defer_bound_ms,
                   spec.scheduler != Scheduler::kDynamic};
  const int device_count = static_cast<int>(devices.size());
  auto degree_of = [&](const OpSpec& op) { return GroupSize(spec.mesh, op.group, device_count); };
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    Member& m = step.members[i];
    static_cast<PlannedOp&>(m) = plan.ops[i];
    step.replays = step.replays && Replays(m.schedule.transport);
    const int degree = degree_of(m.op);
    for (size_t j = 0; j < plan.ops.size() && !m.op.input.empty(); ++j) {
      if (plan.ops[j].op.id != m.op.input) continue;
      m.input_from = &step.members[j];
      m.edge = EdgeFor(m, degree, plan.ops[j], degree_of(plan.ops[j].op), spec.dtype);
    }
    ASSIGN_OR_RETURN(
        m.ctx, OpContext::Create(engine, m.op, spec.dtype, m.devices,
                                 OwnBufferSizes(m, degree, BuffersFor(m.op, degree, m.schedule)),
                                 ops::RankLayout{degree, spec.mesh}));
  }
  // A gelu edge runs in its producer's GEMM epilogue where the engine has
  // them and the bytes line up; one consumer a producer (its GEMM has one D).
  std::set<const Member*> with_epilogue;
  for (size_t i = 0; i < plan.ops.size() && engine.GemmEpilogues(); ++i) {
    Member& m = step.members[i];
    if (m.edge != Edge::kFused || with_epilogue.count(m.input_from) > 0) continue;
    if (!EpilogueFits(m, degree_of(m.op), *m.input_from, degree_of(m.input_from->op), spec.dtype)) {
      continue;
    }
    m.edge = Edge::kEpilogue;
    with_epilogue.insert(m.input_from);
    RETURN_IF_ERROR(WireEpilogue(m));
  }
  for (Member& m : step.members) RETURN_IF_ERROR(AliasInput(m));
  return step;
}

// How each op's input came from its producer's output, by op id ("alias",
// "fused swiglu", "copy"); ops with seeded inputs are left out.
std::map<std::string, std::string> EdgesOf(const std::vector<Member>& members) {
  std::map<std::string, std::string> edges;
  for (const Member& m : members) {
    if (m.edge != Edge::kSeeded) edges[m.op.id] = EdgeName(m.edge, m.op.activation);
  }
  return edges;
}

// Each member's inputs, on the streams the plan put it on.
absl::Status PrepareMembers(RunningStep& step, const JobSpec& spec) {
  // An aliased input is its producer's output, and that is the producer's own
  // seeded input where the producer is a one-rank collective: the aliased
  // ones are filled first, so that the producers' own seeds land last.
  for (const bool aliased : {true, false}) {
    for (Member& m : step.members) {
      if ((m.edge == Edge::kAlias) != aliased) continue;
      RETURN_IF_ERROR(FillInputs(*m.ctx, spec.seed, ops::InputKeysOf(m.ctx->op())));
      RETURN_IF_ERROR(UseChainScale(*m.ctx));
    }
  }
  for (Member& m : step.members) {
    if (m.on_deferred_lane) {
      m.ctx->MoveToDeferredLane();
    } else if (m.deferred) {
      RETURN_IF_ERROR(m.ctx->MoveToSideStreams());
    }
  }
  return step.main().engine().Synchronize(step.devices);
}

// One direct iteration first: it sets up what capture must not (GEMM
// algorithms of shapes not seen yet, communicator channel 1). Then the heat
// probe and the preheat: the float64 checks of the ops before it left the
// GPUs resting for seconds.
absl::Status Warm(OpRun& run, RunningStep& step) {
  RETURN_IF_ERROR(step.Enqueue());
  RETURN_IF_ERROR(run.engine.Synchronize(step.devices));
  RETURN_IF_ERROR(run.ProbeHeat());
  return run.Preheat();
}

// What the timed phases measured of the step.
struct StepMeasurements {
  TimedRun step;
  std::optional<Summary> without_deferred;
  DispatchFigures dispatch;  // the plan's deferrals; under dynamic, their dispatch figures
  std::string lanes;         // Engine::DescribeLanes, under dynamic
  double activation_ms = 0;
  std::optional<Timeline> timeline;
};

// The timed step, then what explains it: the step without its deferred ops,
// the run-time dispatch (dynamic), the activation passes, a traced iteration.
absl::StatusOr<StepMeasurements> Measure(OpRun& run, RunningStep& step, const LayerPlan& plan,
                                         const JobSpec& spec) {
  StepMeasurements out;
  ASSIGN_OR_RETURN(out.step,
                   run.Timed(
                       "step", std::max(1, std::min(spec.warmup, 5)), spec.iterations,
                       [&] { return step.Enqueue(); }, ops::EventKind::kIterEnd, step.replays,
                       /*gated=*/!step.dynamic));
  out.dispatch.deferrals = Deferrals(plan, spec);
  if (!out.dispatch.deferrals.empty()) {  // the step without them: how much of them hid
    auto without = [&] { return EnqueueLayer(step.members, step.main(), nullptr, false); };
    ASSIGN_OR_RETURN(const TimedRun t, run.Timed("step without deferred", 1, spec.iterations,
                                                 without, ops::EventKind::kIterEnd, step.replays));
    out.without_deferred = Summarize(t.times);
  }
  if (step.dynamic) {
    out.lanes = run.engine.DescribeLanes();
    ASSIGN_OR_RETURN(out.dispatch,
                     MeasureDispatch(step.members, step.main(), spec.defer_bound_ms,
                                     std::clamp(spec.iterations, 1, kDispatchIterations),
                                     std::move(out.dispatch.deferrals), step.lanes));
  }
  ASSIGN_OR_RETURN(out.activation_ms,
                   TimeActivationPasses(run, step.members,
                                        std::clamp(spec.iterations, 1, kActivationIterations)));
  if (!spec.timeline) return out;
  std::vector<OpContext*> contexts;
  for (Member& m : step.members) contexts.push_back(m.ctx.get());
  ASSIGN_OR_RETURN(out.timeline,
                   TraceIteration(
                       run, contexts, [&](TimelineEngine& tracer) { return step.Enqueue(&tracer); },
                       /*gated=*/!step.dynamic));
  return out;
}

// Member `m`'s output after a verified iteration against float64 (a chained
// op's against its whole chain's); the check of a chained op, to report.
absl::StatusOr<std::optional<LayerChainCheck>> VerifyMember(Member& m, ops::ChainReference& chains,
                                                            const JobSpec& spec) {
  const bool chained = !m.op.input.empty();
  Verification v;
  double tolerance = 0;
  if (chained) {
    ASSIGN_OR_RETURN(v, chains.Verify(m.spec_index, *m.ctx));
    tolerance = chains.Tolerance(m.spec_index);
  } else {
    ASSIGN_OR_RETURN(v, VerifyOutputs(*m.ctx, spec.seed, ops::InputKeysOf(m.ctx->op())));
    tolerance = OutputTolerance(m.ctx->op().type, spec.dtype, m.ctx->group_size());
  }
  if (!(v.max_rel_error <= tolerance)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "layer step: op %s (%s): verification%s failed: max|y-ref|/max|ref| = %.3g exceeds "
        "%.3g",
        m.ctx->op().id, m.schedule.Name(),
        chained ? absl::StrCat(" of the chain ", ChainName(spec, m.spec_index)) : "",
        v.max_rel_error, tolerance));
  }
  if (!chained) return std::nullopt;
  return LayerChainCheck{m.op.id, ChainName(spec, m.spec_index), v.max_rel_error, tolerance};
}

// Run side by side, every op must still compute what it computes alone: one
// iteration on poisoned outputs, then every op checked; FAILED_PRECONDITION
// names the first that does not.
absl::StatusOr<std::vector<LayerChainCheck>> Verify(OpRun& run, RunningStep& step,
                                                    const JobSpec& spec) {
  run.heat_gemm_ms = 0;
  for (Member& m : step.members) RETURN_IF_ERROR(PoisonOutputs(*m.ctx));
  RETURN_IF_ERROR(run.Timed(
                         "verify", 0, 1, [&] { return step.Enqueue(); }, ops::EventKind::kIterEnd,
                         step.replays, !step.dynamic)
                      .status());
  ops::ChainReference chains(spec, static_cast<int>(step.devices.size()));
  std::vector<LayerChainCheck> checks;
  for (Member& m : step.members) {
    ASSIGN_OR_RETURN(std::optional<LayerChainCheck> check, VerifyMember(m, chains, spec));
    if (check) checks.push_back(std::move(*check));
  }
  return checks;
}

// The step's energy beside its ops op by op: each op's own timed step (the
// windows of its timed rounds, nothing else: not its GEMM alone nor its
// collective alone), one step of each, joules and seconds from the same
// windows; the time beside it is the ops' step medians summed, the report's
// "op by op" time.
void SetEnergy(const EnergyWindow& step, const std::vector<OpMeasurement>& ops,
               LayerStepReport& layer) {
  std::vector<EnergyWindow> op_steps;
  double op_by_op_ms = 0;
  for (const OpMeasurement& op : ops) {
    const OpFigures f = FiguresOf(op);
    op_steps.push_back(f.step_energy);
    op_by_op_ms += f.step.median;
  }
  layer.energy =
      EnergyOf(step, layer.step.median, OneStepOfEach(op_steps), op_by_op_ms, "op by op");
  double flops = 0;
  for (const OpMeasurement& op : ops) flops += OpFlops(op.op);
  if (layer.energy.valid) layer.joules_per_tflop = JoulesPerTflop(layer.energy.step_joules, flops);
}

// The step's report from the plan and what the phases returned.
LayerStepReport ReportOf(const LayerPlan& plan, const JobSpec& spec, StepMeasurements measured,
                         std::vector<LayerChainCheck> chains, const std::vector<OpMeasurement>& ops,
                         int device_count) {
  LayerStepReport layer;
  layer.step = Summarize(measured.step.times);
  layer.scheduler = SchedulerName(spec.scheduler);
  layer.captured = measured.step.replayed;
  layer.scheduler_notes = plan.notes;
  layer.deferrals = std::move(measured.dispatch.deferrals);
  layer.without_deferred = measured.without_deferred;
  double deferred_alone = 0;
  for (const LayerDeferral& d : layer.deferrals) deferred_alone += d.alone_ms;
  if (layer.without_deferred && deferred_alone > 0) {
    const double added = std::max(0.0, layer.step.median - layer.without_deferred->median);
    layer.deferred_hidden_fraction = std::clamp(1.0 - added / deferred_alone, 0.0, 1.0);
  }
  layer.lanes = std::move(measured.lanes);
  layer.dispatch_iterations = measured.dispatch.iterations;
  layer.lane_figures = std::move(measured.dispatch.lanes);
  layer.activation_ms = measured.activation_ms;
  // The step's time that only communication explains: the step less the ops'
  // GEMMs alone and the activation passes, floored at 0; 0 when nothing communicates.
  double gemms_ms = 0;
  for (const OpMeasurement& op : ops) gemms_ms += FiguresOf(op).gemm_alone.median;
  if (Communicates(plan.ops, spec, device_count)) {
    layer.exposed_comm_ms = std::max(0.0, layer.step.median - gemms_ms - layer.activation_ms);
  }
  for (int i : plan.order) layer.order.push_back(spec.ops[i].id);
  for (const LayerDeferral& d : layer.deferrals) {
    layer.deferred.push_back(d.op);
    layer.joined_before.push_back(d.joined_before);
  }
  layer.timeline = std::move(measured.timeline);
  if (layer.timeline) layer.timeline->enqueued_not_replayed = layer.captured;
  layer.chains = std::move(chains);
  SetEnergy(measured.step.energy, ops, layer);
  return layer;
}

}  // namespace

absl::StatusOr<LayerStepOutcome> TimeLayerStep(engine::Engine& engine, const JobSpec& spec,
                                               const std::vector<int>& devices,
                                               const RunHooks& hooks, const std::vector<int>& order,
                                               const std::vector<OpMeasurement>& measured,
                                               TuningCache* tuning_cache) {
  if (order.size() < 2 || !spec.layer_step) return LayerStepOutcome{};
  ASSIGN_OR_RETURN(const PlanFigures figures,
                   AgreedFigures(engine, spec, devices, order, measured, tuning_cache));
  ASSIGN_OR_RETURN(const LayerPlan plan,
                   PlanLayerStep(spec, devices, figures, engine.StreamsPerRole() >= 2));
  absl::StatusOr<RunningStep> step = CreateMembers(engine, spec, devices, plan);
  if (absl::IsResourceExhausted(step.status())) {
    return LayerStepOutcome{std::nullopt,
                            absl::StrCat("no layer step: the buffers of every op do "
                                         "not fit in device memory at once (",
                                         step.status().message(), ")"),
                            {}};
  }
  RETURN_IF_ERROR(step.status());
  step->lanes = hooks.lanes;
  RETURN_IF_ERROR(PrepareMembers(*step, spec));
  const int count = static_cast<int>(order.size());
  OpRun run{engine, spec, hooks, count - 1, count, step->main()};
  run.label = "layer";
  RETURN_IF_ERROR(Warm(run, *step));
  ASSIGN_OR_RETURN(StepMeasurements measurements, Measure(run, *step, plan, spec));
  std::vector<LayerChainCheck> chains;
  if (spec.verify) {
    ASSIGN_OR_RETURN(chains, Verify(run, *step, spec));
    RETURN_IF_ERROR(HandOutOutputs(step->members, hooks));
  }
  return LayerStepOutcome{ReportOf(plan, spec, std::move(measurements), std::move(chains), measured,
                                   static_cast<int>(devices.size())),
                          "", EdgesOf(step->members)};
}

}  // namespace overlap::runner
