#include "server/runner/op_phases.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/one_rank.h"
#include "common/planner/planner.h"
#include "common/stats.h"
#include "common/status_macros.h"
#include "server/ops/layer_ops.h"
#include "server/ops/reference.h"
#include "server/runner/autotune.h"
#include "server/runner/traced_iteration.h"

namespace overlap::runner {

using ops::CandidateSchedules;
using ops::EnqueueOp;
using ops::OpContext;
using ops::Schedule;

bool SpansDaemons(const engine::Engine& engine, const std::vector<int>& devices) {
  return std::any_of(devices.begin(), devices.end(),
                     [&](int device) { return !engine.IsLocalDevice(device); });
}

namespace {

// Autotune measures each candidate this many times (after one warm-up) per
// round, in kTuneRounds round-robin passes over the candidates; then the
// leaders kRunoffIterations times in each of kRunoffRounds (autotune.h).
constexpr int kTuneIterations = 5;
constexpr int kTuneRounds = 2;
constexpr int kRunoffIterations = 7;
constexpr int kRunoffRounds = 3;
// The timed iterations are split into this many rounds, each GEMM alone then step.
constexpr int kTimedRounds = 4;

TuningKey KeyFor(const engine::Engine& engine, const OpSpec& op, DType dtype, int tp,
                 int first_device, const Mesh& mesh) {
  TuningKey key;
  key.op_type = OpTypeName(op.type);
  // A row-parallel gemm splits k, not n: another GEMM at the same m, k, n.
  if (op.row_parallel) key.op_type += "_row";
  key.m = op.m;
  key.k = op.k;
  key.n = op.n;
  key.dtype = DTypeName(dtype);
  key.tp = tp;
  key.requested =
      absl::StrCat(OverlapModeName(op.mode), "/", op.chunks, "/", TransportName(op.transport));
  if (op.algorithm != AllReduceAlgorithm::kDefault) {
    absl::StrAppend(&key.requested, "/", AllReduceAlgorithmName(op.algorithm));
  }
  // In a mesh every group runs at once, beside the others: another contest
  // than the same op alone.
  if (mesh.declared()) {
    absl::StrAppend(&key.requested, "/", OpGroupName(op.group), "@", mesh.tp, "x", mesh.dp);
  }
  key.environment = TuningEnvironment(engine, first_device);
  return key;
}

// Warm-up iterations of the baselines: the job's, between 1 and 5.
int BaselineWarmup(const JobSpec& spec) { return std::max(1, std::min(spec.warmup, 5)); }

void Append(std::vector<double>& to, const std::vector<double>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

// Autotune over `candidates`: kTuneRounds over all of them, then the runoff of
// the leaders; the tally decides. Past the job's autotune_budget_s no further
// run starts (the first always does), and the choice says what was cut.
absl::StatusOr<AutotuneChoice> Tune(OpRun& run, Autotune& tally) {
  const OpSpec& op = run.ctx.op();
  const std::vector<Schedule>& candidates = tally.candidates();
  // Each run's phase names its stage, round and candidate, "k of N", so that a
  // follower sees how far autotune is.
  auto time = [&](size_t i, const std::string& stage, int k, int n, int iterations) {
    const Schedule& s = candidates[i];
    return run.Timed(
        absl::StrFormat("autotune %s, candidate %d/%d: %s", stage, k, n, s.Name()), 1, iterations,
        [&] { return EnqueueOp(run.ctx, s); }, ops::EventKind::kIterEnd, Replays(s.transport));
  };
  // Every other round runs the candidates in reverse, so that none is always
  // timed first (on the GPU the preheat left) or last (after the others' heat).
  auto in_turn = [](const std::vector<size_t>& order, int round) {
    return round % 2 == 0 ? order : std::vector<size_t>(order.rbegin(), order.rend());
  };
  const double budget_s = run.spec.autotune_budget_s;
  const absl::Time deadline =
      budget_s > 0 ? absl::Now() + absl::Seconds(budget_s) : absl::InfiniteFuture();
  int runs = 0;
  const int planned = static_cast<int>(candidates.size()) * kTuneRounds;
  bool cut = false;
  auto over_budget = [&] { return runs > 0 && absl::Now() >= deadline; };
  // One stage: `rounds` rounds over `order`, each run's times handed to
  // `add`; the budget may cut it.
  auto stage = [&](const char* name, const std::vector<size_t>& order, int rounds, int iterations,
                   auto add) -> absl::Status {
    for (int round = 0; round < rounds && !cut; ++round) {
      int k = 0;
      for (size_t i : in_turn(order, round)) {
        if ((cut = over_budget())) break;
        ASSIGN_OR_RETURN(const TimedRun t,
                         time(i, absl::StrFormat("%s %d/%d", name, round + 1, rounds), ++k,
                              static_cast<int>(order.size()), iterations));
        ++runs;
        add(i, round, t);
      }
    }
    return absl::OkStatus();
  };
  std::vector<size_t> all(candidates.size());
  std::iota(all.begin(), all.end(), 0);
  RETURN_IF_ERROR(run.Preheat());
  RETURN_IF_ERROR(stage(
      "round", all, kTuneRounds, kTuneIterations, [&](size_t i, int round, const TimedRun& t) {
        tally.AddRound(i, t.times);
        GetLogger("ops")->debug("autotune {} {} round {}: {:.3f} ms (host enqueue {:.3f} ms)",
                                op.id, candidates[i].Name(), round + 1, Summarize(t.times).median,
                                t.host_enqueue_ms);
      }));
  const bool fall_back_to_serial = op.mode == OverlapMode::kAuto;
  const std::vector<size_t> entrants =
      cut ? std::vector<size_t>{} : tally.RunoffEntrants(fall_back_to_serial);
  RETURN_IF_ERROR(stage("runoff", entrants, kRunoffRounds, kRunoffIterations,
                        [&](size_t i, int, const TimedRun& t) { tally.AddRunoff(i, t.times); }));
  AutotuneChoice choice = tally.Decide(fall_back_to_serial);
  if (cut) {
    int timed = 0;
    for (const CandidateScore& score : tally.Scores()) timed += std::isfinite(score.best_ms);
    absl::StrAppendFormat(
        &choice.reason,
        "; autotune_budget_s (%g s) cut autotune short %s: %d of %d candidates timed", budget_s,
        runs < planned ? absl::StrFormat("after %d of its %d first-stage runs", runs, planned)
                       : std::string("in its runoff"),
        timed, static_cast<int>(candidates.size()));
  }
  return choice;
}

}  // namespace

std::vector<int> GroupMajorDevices(const JobSpec& spec, const std::vector<int>& devices,
                                   OpGroup group) {
  std::vector<int> out;
  for (const std::vector<int>& positions :
       GroupsOf(spec.mesh, group, static_cast<int>(devices.size()))) {
    for (int position : positions) out.push_back(devices[position]);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<OpContext>> CreateOpContext(engine::Engine& engine,
                                                           const JobSpec& spec,
                                                           const std::vector<int>& devices,
                                                           const OpSpec& op) {
  const int tp = GroupSize(spec.mesh, op.group, static_cast<int>(devices.size()));
  ops::BufferSizes sizes;
  for (const Schedule& s : CandidateSchedules(op, tp, engine.LibraryAlgorithms(), spec.mesh)) {
    sizes = ops::MaxSizes(sizes, ops::BuffersFor(op, tp, s));
  }
  return OpContext::Create(engine, op, spec.dtype, GroupMajorDevices(spec, devices, op.group),
                           sizes, ops::RankLayout{tp, spec.mesh});
}

absl::Status PrepareInputs(OpRun& run) {
  const std::vector<int> devices = run.ctx.devices();
  RETURN_IF_ERROR(ops::FillInputs(run.ctx, run.spec.seed, ops::InputKeysOf(run.ctx.op())));
  RETURN_IF_ERROR(run.engine.Synchronize(devices));
  // One serial iteration fills every intermediate buffer (the gathered A that
  // the GEMM alone reads, the partials) with real data: a GEMM on never-written
  // memory reads zeros and runs faster than it will on real data.
  const Transport fill = SpansDaemons(run.engine, devices) ? Transport::kNccl : Transport::kP2p;
  RETURN_IF_ERROR(EnqueueOp(run.ctx, Schedule{OverlapMode::kSerial, 1, fill}));
  RETURN_IF_ERROR(run.engine.Synchronize(devices));
  return run.ProbeHeat();
}

namespace {

// The candidates worth timing, where this node keeps a calibration for `tp`
// ranks that matches it: serial over NCCL and the planner's fastest third
// (common/planner/planner.h). All of them otherwise. `note` says which.
std::vector<Schedule> PlannedCandidates(OpRun& run, TuningCache& cache, int tp,
                                        std::vector<Schedule> candidates, std::string* note) {
  absl::StatusOr<planner::Calibration> calibration =
      MatchingCalibration(cache, run.engine, run.ctx.rank(0).device, tp);
  if (absl::IsNotFound(calibration.status())) return candidates;
  if (!calibration.ok()) {
    *note = absl::StrCat("; the kept calibration was not used: ", calibration.status().message());
    return candidates;
  }
  const planner::CostModel model(*calibration, {});
  const planner::OpPlan plan = planner::PlanOp(model, run.ctx.op(), tp, run.spec.dtype, candidates);
  const std::vector<size_t> chosen = planner::CandidatesToMeasure(plan, candidates);
  if (chosen.size() == candidates.size()) return candidates;
  std::vector<Schedule> out;
  for (size_t i : chosen) out.push_back(candidates[i]);
  *note = absl::StrFormat("; the planner chose %d of %d candidates to measure", out.size(),
                          candidates.size());
  if (const planner::SchedulePrediction* best = plan.best()) {
    absl::StrAppend(note, absl::StrFormat(" (predicted best %s, %.3f ms)", best->schedule.Name(),
                                          best->step_ms));
  }
  return out;
}

}  // namespace

absl::StatusOr<ScheduleChoice> ChooseSchedule(OpRun& run, const ChoiceSources& sources) {
  const OpSpec& op = run.ctx.op();
  const int tp = run.ctx.group_size();
  std::vector<Schedule> candidates =
      CandidateSchedules(op, tp, run.engine.LibraryAlgorithms(), run.spec.mesh);
  const std::string one_reason = tp == 1 && !IsGemmOnly(op.type) ? kOneRankNote
                                 : op.mode == OverlapMode::kAuto ? kOnlyOneSchedule
                                                                 : "as requested";
  if (sources.decided != nullptr) {
    const auto decided = sources.decided->find(op.id);
    if (decided == sources.decided->end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("op ", op.id, ": no schedule was decided for it before the run"));
    }
    std::string reason =
        "decided by the coordinator, by the rule for jobs spanning daemons (no autotune across "
        "them)";
    if (sources.decided_notes != nullptr) {
      if (auto note = sources.decided_notes->find(op.id); note != sources.decided_notes->end()) {
        reason = note->second;
      }
    }
    return ScheduleChoice{decided->second, candidates.size() == 1 ? one_reason : reason, {}};
  }
  if (candidates.size() == 1) return ScheduleChoice{candidates[0], one_reason, {}};
  const TuningKey key =
      KeyFor(run.engine, op, run.spec.dtype, tp, run.ctx.rank(0).device, run.spec.mesh);
  if (sources.cache != nullptr) {
    if (auto hit = sources.cache->Lookup(key, sources.not_before_unix_ms)) {
      return ScheduleChoice{
          hit->schedule, absl::StrFormat("tuning cache (%.3f ms when tuned)", hit->step_ms), {}};
    }
  }
  std::string planned;
  if (sources.cache != nullptr) {
    candidates = PlannedCandidates(run, *sources.cache, tp, std::move(candidates), &planned);
  }
  Autotune tally(candidates);
  ASSIGN_OR_RETURN(const AutotuneChoice decided, Tune(run, tally));
  ScheduleChoice choice{decided.schedule, decided.reason + planned, tally.Scores()};
  GetLogger("ops")->debug("autotune {}: {}", op.id, decided.reason);
  if (sources.cache != nullptr) {
    // The cache only spares a later job the tuning: a choice it cannot keep (a
    // full disk) must not fail the job that made it.
    if (absl::Status kept = sources.cache->Store(key, TunedChoice{decided.schedule, decided.ms},
                                                 absl::ToUnixMillis(absl::Now()));
        !kept.ok()) {
      GetLogger("ops")->warn("autotune {}: the tuning cache could not keep the choice: {}", op.id,
                             kept.ToString());
      absl::StrAppend(&choice.reason, " (not kept in the tuning cache: ", kept.message(), ")");
    }
  }
  return choice;
}

absl::StatusOr<CommAlone> TimeCommAlone(OpRun& run) {
  CommAlone comm;
  const OpType type = run.ctx.op().type;
  // A collective alone is its own comm alone (its steps), a GEMM has none.
  if (run.ctx.group_size() <= 1 || IsCollectiveOnly(type) || IsGemmOnly(type)) return comm;
  const int warm = BaselineWarmup(run.spec);
  ASSIGN_OR_RETURN(const TimedRun nccl,
                   run.Timed("comm_alone nccl", warm, run.spec.iterations,
                             [&] { return ops::EnqueueCommAlone(run.ctx, Transport::kNccl); }));
  // Across daemons only collectives move data: there is no p2p to time.
  if (SpansDaemons(run.engine, run.ctx.devices())) {
    comm.nccl = nccl.times;
    comm.fastest = Transport::kNccl;
    comm.nccl_energy = nccl.energy;
    return comm;
  }
  // Replayed like the p2p schedules, so that step and ideal are timed alike.
  ASSIGN_OR_RETURN(const TimedRun p2p,
                   run.Timed(
                       "comm_alone p2p", warm, run.spec.iterations,
                       [&] { return ops::EnqueueCommAlone(run.ctx, Transport::kP2p); },
                       ops::EventKind::kIterEnd, Replays(Transport::kP2p)));
  comm.nccl = nccl.times;
  comm.p2p = p2p.times;
  comm.nccl_energy = nccl.energy;
  comm.p2p_energy = p2p.energy;
  comm.fastest =
      Summarize(comm.p2p).median < Summarize(comm.nccl).median ? Transport::kP2p : Transport::kNccl;
  return comm;
}

int SustainedIterations(double sustain_ms, double gemm_ms, int at_least) {
  constexpr int kMostIterations = 100000;
  if (!(gemm_ms > 0)) return at_least;
  const double wanted = std::ceil(sustain_ms / gemm_ms);
  return static_cast<int>(std::clamp(wanted, static_cast<double>(std::max(2, at_least)),
                                     static_cast<double>(kMostIterations)));
}

absl::StatusOr<TimedRounds> TimeRounds(OpRun& run, const Schedule& schedule, Transport beside) {
  const JobSpec& spec = run.spec;
  OpContext& ctx = run.ctx;
  const OpType type = ctx.op().type;
  const bool gemm_only = IsGemmOnly(type);
  const bool both = !IsCollectiveOnly(type) && !gemm_only;
  const int tp = ctx.group_size();
  const int iters = spec.iterations;
  const int warm = BaselineWarmup(spec);
  TimedRounds out;
  out.gemm_by_rank.resize(ctx.tp());  // a slow GPU shows here
  out.step_by_group.resize(ctx.groups());
  const auto add_ranks = [&](const TimedRun& t) {
    for (size_t r = 0; r < t.rank_times.size(); ++r) Append(out.gemm_by_rank[r], t.rank_times[r]);
  };
  const int rounds = std::max(1, std::min(kTimedRounds, iters));
  for (int i = 0; i < rounds; ++i) {
    const int count = iters / rounds + (i < iters % rounds ? 1 : 0);
    const int first_warm = i == 0 ? warm : 1;
    const std::string round = rounds > 1 ? absl::StrFormat(" %d/%d", i + 1, rounds) : "";
    if (both) {
      ASSIGN_OR_RETURN(const TimedRun g, run.Timed("gemm_alone" + round, first_warm, count,
                                                   [&] { return ops::EnqueueGemmAlone(ctx); }));
      Append(out.gemm, g.times);
      out.gemm_energy.Add(g.energy);
      add_ranks(g);
    }
    if (tp > 1 && both) {
      // The GEMM's own time while the collective runs beside it: contention for
      // SMs and HBM bounds what any schedule can hide.
      ASSIGN_OR_RETURN(
          const TimedRun b,
          run.Timed(
              "gemm_beside_comm" + round, first_warm, count,
              [&] { return ops::EnqueueGemmBesideComm(ctx, beside, ops::EventKind::kGemmEnd); },
              ops::EventKind::kGemmEnd));
      Append(out.beside, b.times);
    }
    ASSIGN_OR_RETURN(const TimedRun t, run.Timed(
                                           "timed" + round, i == 0 ? spec.warmup : 1, count,
                                           [&] { return EnqueueOp(ctx, schedule); },
                                           ops::EventKind::kIterEnd, Replays(schedule.transport)));
    Append(out.step, t.times);
    out.step_energy.Add(t.energy);
    for (size_t g = 0; g < t.group_times.size(); ++g)
      Append(out.step_by_group[g], t.group_times[g]);
    if (gemm_only) add_ranks(t);  // a GEMM alone: its steps are its GEMM alone
    out.host_enqueue.push_back(t.host_enqueue_ms);
    out.step_replayed = out.step_replayed && t.replayed;
  }
  if (spec.gemm_alone_sustain_ms > 0 && !IsCollectiveOnly(type)) {
    const double rounds_ms = Summarize(gemm_only ? out.step : out.gemm).median;
    ASSIGN_OR_RETURN(const TimedRun s,
                     run.Timed("gemm_alone sustained", 0,
                               SustainedIterations(spec.gemm_alone_sustain_ms, rounds_ms, iters),
                               [&] { return ops::EnqueueGemmAlone(ctx); }));
    // Its second half: by then the clocks settled where the load keeps them.
    out.gemm.assign(s.times.begin() + static_cast<std::ptrdiff_t>(s.times.size() / 2),
                    s.times.end());
    out.gemm_energy = s.energy;
  }
  return out;
}

absl::StatusOr<std::optional<Timeline>> TraceOp(OpRun& run, const Schedule& schedule) {
  if (!run.spec.timeline) return std::nullopt;
  return TraceIteration(run, {&run.ctx}, [&](TimelineEngine& tracer) {
    tracer.SetLabel(run.ctx.op().id);
    return EnqueueOp(run.ctx, schedule);
  });
}

absl::StatusOr<std::optional<ops::Verification>> VerifyOp(OpRun& run, const Schedule& schedule) {
  if (!run.spec.verify) return std::nullopt;
  OpContext& ctx = run.ctx;
  const OpSpec& op = ctx.op();
  run.Progress("verify", 0, 1);
  run.heat_gemm_ms = 0;  // a head start would write outputs the check must see poisoned
  RETURN_IF_ERROR(ops::PoisonOutputs(ctx));
  RETURN_IF_ERROR(run.Timed(
                         "verify", 0, 1, [&] { return EnqueueOp(ctx, schedule); },
                         ops::EventKind::kIterEnd, Replays(schedule.transport))
                      .status());
  const absl::Time check_start = absl::Now();
  ASSIGN_OR_RETURN(const ops::Verification v,
                   ops::VerifyOutputs(ctx, run.spec.seed, ops::InputKeysOf(ctx.op())));
  GetLogger("ops")->debug("{} checked against float64 in {:.0f} ms ({} rows x {} columns)", op.id,
                          absl::ToDoubleMilliseconds(absl::Now() - check_start), v.rows_checked,
                          v.cols_checked);
  const double tolerance = ops::OutputTolerance(op.type, run.spec.dtype, ctx.group_size());
  if (!(v.max_rel_error <= tolerance)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "op %s (%s): verification failed: max|y-ref|/max|ref| = %.3g exceeds %.3g for %s", op.id,
        schedule.Name(), v.max_rel_error, tolerance, DTypeName(run.spec.dtype)));
  }
  return v;
}

}  // namespace overlap::runner
