#include "server/runner/job_runner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/graph_validator.h"
#include "common/library_env.h"
#include "common/logging.h"
#include "common/stats.h"
#include "common/status_macros.h"
#include "overlap_git_commit.h"
#include "server/runner/autotune.h"
#include "server/runner/graph_replay.h"
#include "server/ops/layer_ops.h"
#include "server/runner/layer_step.h"
#include "server/runner/op_run.h"
#include "server/ops/reference.h"
#include "server/runner/traced_iteration.h"
#include "server/runner/tuning_cache.h"

namespace overlap::runner {

using ops::BufferBytes;
using ops::BufferDTypesFor;
using ops::BufferSizes;
using ops::BuffersFor;
using ops::CandidateSchedules;
using ops::EnqueueCommAlone;
using ops::EnqueueGemmAlone;
using ops::EnqueueGemmBesideComm;
using ops::EnqueueOp;
using ops::FillInputs;
using ops::MaxSizes;
using ops::OpContext;
using ops::OutputTolerance;
using ops::PoisonOutputs;
using ops::Schedule;
using ops::Verification;
using ops::VerifyOutputs;
namespace {

// The tuning cache as one job uses it: choices tuned before not_before_unix_ms
// do not answer (JobSpec::retune).
struct TuningUse {
  TuningCache* cache = nullptr;
  int64_t not_before_unix_ms = 0;
};

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
                 int first_device) {
  TuningKey key;
  key.op_type = OpTypeName(op.type);
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
  key.environment = TuningEnvironment(engine, first_device);
  return key;
}

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

// `scores` gets what autotune measured of every candidate (untouched when it did not tune).
absl::StatusOr<Schedule> ChooseSchedule(OpRun& run, const TuningUse& tuning, std::string* reason,
                                        std::vector<CandidateScore>* scores) {
  const OpSpec& op = run.ctx.op();
  const int tp = run.ctx.tp();
  std::vector<Schedule> candidates = CandidateSchedules(op, tp, run.engine.LibraryAlgorithms());
  if (candidates.size() == 1) {
    *reason = op.mode == OverlapMode::kAuto ? kOnlyOneSchedule : "as requested";
    return candidates[0];
  }
  const TuningKey key = KeyFor(run.engine, op, run.spec.dtype, tp, run.ctx.rank(0).device);
  if (tuning.cache != nullptr) {
    if (auto hit = tuning.cache->Lookup(key, tuning.not_before_unix_ms)) {
      *reason = absl::StrFormat("tuning cache (%.3f ms when tuned)", hit->step_ms);
      return hit->schedule;
    }
  }
  Autotune tally(candidates);
  auto time = [&](size_t i, const std::string& phase, int iterations) {
    const Schedule& s = candidates[i];
    return run.Timed(
        absl::StrFormat("autotune %s (%s)", s.Name(), phase), 1, iterations,
        [&] { return EnqueueOp(run.ctx, s); }, "iter_end", Replays(s.transport));
  };
  // Every other round runs the candidates in reverse, so that none is always
  // timed first (on the GPU the preheat left) or last (after the others' heat).
  auto in_turn = [](const std::vector<size_t>& order, int round) {
    return round % 2 == 0 ? order : std::vector<size_t>(order.rbegin(), order.rend());
  };
  std::vector<size_t> all(candidates.size());
  std::iota(all.begin(), all.end(), 0);
  RETURN_IF_ERROR(run.Preheat());
  for (int round = 0; round < kTuneRounds; ++round) {
    for (size_t i : in_turn(all, round)) {
      ASSIGN_OR_RETURN(
          std::vector<double> t,
          time(i, absl::StrFormat("round %d/%d", round + 1, kTuneRounds), kTuneIterations));
      tally.AddRound(i, t);
      GetLogger("ops")->debug("autotune {} {} round {}: {:.3f} ms (host enqueue {:.3f} ms)", op.id,
                              candidates[i].Name(), round + 1, Summarize(t).median,
                              run.host_enqueue_ms);
    }
  }
  const bool fall_back_to_serial = op.mode == OverlapMode::kAuto;
  const std::vector<size_t> entrants = tally.RunoffEntrants(fall_back_to_serial);
  for (int round = 0; !entrants.empty() && round < kRunoffRounds; ++round) {
    for (size_t i : in_turn(entrants, round)) {
      ASSIGN_OR_RETURN(
          std::vector<double> t,
          time(i, absl::StrFormat("runoff %d/%d", round + 1, kRunoffRounds), kRunoffIterations));
      tally.AddRunoff(i, t);
    }
  }
  const AutotuneChoice choice = tally.Decide(fall_back_to_serial);
  *reason = choice.reason;
  *scores = tally.Scores();
  GetLogger("ops")->debug("autotune {}: {}", op.id, choice.reason);
  if (tuning.cache != nullptr) {
    // The cache only spares a later job the tuning: a choice it cannot keep (a
    // full disk) must not fail the job that made it.
    if (absl::Status kept = tuning.cache->Store(key, TunedChoice{choice.schedule, choice.ms},
                                                absl::ToUnixMillis(absl::Now()));
        !kept.ok()) {
      GetLogger("ops")->warn("autotune {}: the tuning cache could not keep the choice: {}", op.id,
                             kept.ToString());
      absl::StrAppend(reason, " (not kept in the tuning cache: ", kept.message(), ")");
    }
  }
  return choice.schedule;
}

absl::StatusOr<v1::OpResult> RunOp(engine::Engine& engine, const JobSpec& spec,
                                   const std::vector<int>& devices, const RunHooks& hooks,
                                   const TuningUse& tuning, int op_index, int op_count,
                                   const OpSpec& op) {
  const int tp = static_cast<int>(devices.size());
  BufferSizes sizes;
  for (const Schedule& s : CandidateSchedules(op, tp, engine.LibraryAlgorithms())) {
    sizes = MaxSizes(sizes, BuffersFor(op, tp, s));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<OpContext> ctx,
                   OpContext::Create(engine, op, spec.dtype, devices, sizes));
  OpRun run{engine, spec, hooks, op_index, op_count, *ctx};
  run.Progress("setup", 0, 0);
  RETURN_IF_ERROR(FillInputs(*ctx, spec.seed, op_index));
  RETURN_IF_ERROR(engine.Synchronize(devices));
  // One serial iteration fills every intermediate buffer (the gathered A that
  // the GEMM alone reads, the partials) with real data: a GEMM on never-written
  // memory reads zeros and runs faster than it will on real data.
  RETURN_IF_ERROR(EnqueueOp(*ctx, Schedule{OverlapMode::kSerial, 1, Transport::kP2p}));
  RETURN_IF_ERROR(engine.Synchronize(devices));
  const bool collective_only = IsCollectiveOnly(op.type);
  // A GEMM alone is its own "GEMM alone" (its steps, below) and has no collective.
  const bool gemm_only = IsGemmOnly(op.type);
  const bool both = !collective_only && !gemm_only;
  RETURN_IF_ERROR(run.ProbeHeat());

  const int iters = spec.iterations;
  const int warm = std::max(1, std::min(spec.warmup, 5));
  std::string reason;
  std::vector<CandidateScore> scores;
  ASSIGN_OR_RETURN(Schedule schedule, ChooseSchedule(run, tuning, &reason, &scores));
  // The collective alone on both transports; the faster one is "comm alone".
  std::vector<double> comm_t{0.0}, nccl_t{0.0}, p2p_t{0.0};
  Transport fastest = Transport::kNccl;
  // A collective alone is its own "comm alone": its steps, below.
  if (tp > 1 && both) {
    ASSIGN_OR_RETURN(nccl_t, run.Timed("comm_alone nccl", warm, iters,
                                       [&] { return EnqueueCommAlone(*ctx, Transport::kNccl); }));
    // Replayed like the p2p schedules, so that step and ideal are timed alike.
    ASSIGN_OR_RETURN(p2p_t, run.Timed(
                                "comm_alone p2p", warm, iters,
                                [&] { return EnqueueCommAlone(*ctx, Transport::kP2p); }, "iter_end",
                                Replays(Transport::kP2p)));
    const bool p2p_faster = Summarize(p2p_t).median < Summarize(nccl_t).median;
    comm_t = p2p_faster ? p2p_t : nccl_t;
    fastest = p2p_faster ? Transport::kP2p : Transport::kNccl;
  }
  // The collective alone left the SMs idle: the first GEMM alone would run
  // rested, faster than the steps after it, and make the ideal too low.
  RETURN_IF_ERROR(run.Preheat());

  // The GEMM alone, the GEMM beside the collective and the step alternate in
  // rounds: sustained GEMMs lower the SM clock within seconds, so measuring one
  // long after the other would put them at different clocks and skew step /
  // ideal and the slowdown either way.
  std::vector<double> gemm_t, beside_t, step_t, host_t;
  std::vector<std::vector<double>> gemm_rank_t(tp);  // a slow GPU shows here
  bool step_replayed = true;
  auto append = [](std::vector<double>& to, const std::vector<double>& from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  const int rounds = std::max(1, std::min(kTimedRounds, iters));
  for (int i = 0; i < rounds; ++i) {
    const int count = iters / rounds + (i < iters % rounds ? 1 : 0);
    const int first_warm = i == 0 ? warm : 1;
    const std::string round = rounds > 1 ? absl::StrFormat(" %d/%d", i + 1, rounds) : "";
    if (both) {
      ASSIGN_OR_RETURN(std::vector<double> g, run.Timed("gemm_alone" + round, first_warm, count,
                                                        [&] { return EnqueueGemmAlone(*ctx); }));
      append(gemm_t, g);
      for (size_t r = 0; r < run.rank_times.size(); ++r) append(gemm_rank_t[r], run.rank_times[r]);
    }
    if (tp > 1 && both) {
      // The GEMM's own time while the collective runs beside it: contention for
      // SMs and HBM bounds what any schedule can hide.
      ASSIGN_OR_RETURN(
          std::vector<double> b,
          run.Timed(
              "gemm_beside_comm" + round, first_warm, count,
              [&] { return EnqueueGemmBesideComm(*ctx, fastest, "gemm_end"); }, "gemm_end"));
      append(beside_t, b);
    }
    ASSIGN_OR_RETURN(std::vector<double> t, run.Timed(
                                                "timed" + round, i == 0 ? spec.warmup : 1, count,
                                                [&] { return EnqueueOp(*ctx, schedule); },
                                                "iter_end", Replays(schedule.transport)));
    append(step_t, t);
    if (gemm_only) {
      for (size_t r = 0; r < run.rank_times.size(); ++r) append(gemm_rank_t[r], run.rank_times[r]);
    }
    host_t.push_back(run.host_enqueue_ms);
    step_replayed = step_replayed && run.replayed;
  }
  std::optional<v1::Timeline> timeline;
  if (spec.timeline) {
    ASSIGN_OR_RETURN(timeline, TraceIteration(run, {ctx.get()}, [&](TimelineEngine& tracer) {
                       tracer.SetLabel(op.id);
                       return EnqueueOp(*ctx, schedule);
                     }));
  }

  v1::OpResult res;
  res.set_id(op.id);
  res.set_type(OpTypeName(op.type));
  res.set_mode(OverlapModeName(schedule.mode));
  res.set_schedule(schedule.Name());
  res.set_requested_mode(OverlapModeName(op.mode));
  res.set_transport(TransportName(schedule.transport));
  res.set_chunks(schedule.chunks);
  res.set_algorithm(StoredAllReduceAlgorithm(schedule.algorithm));
  res.set_m(op.m);
  res.set_k(op.k);
  res.set_n(op.n);
  res.set_tp(tp);
  res.set_dtype(DTypeName(spec.dtype));
  res.set_auto_reason(reason);
  for (const CandidateScore& c : scores) {
    if (!std::isfinite(c.best_ms)) continue;
    v1::CandidateTiming* t = res.add_candidates();
    t->set_schedule(c.schedule.Name());
    t->set_best_ms(c.best_ms);
    t->set_runoff_ms(c.runoff_ms);
  }
  if (collective_only) {
    comm_t = step_t;
    (schedule.transport == Transport::kP2p ? p2p_t : nccl_t) = step_t;
  }
  if (gemm_only) gemm_t = step_t;
  const Summary step = Summarize(step_t), gemm = Summarize(gemm_t), comm = Summarize(comm_t);
  *res.mutable_step() = ToProto(step);
  *res.mutable_gemm_alone() = ToProto(gemm);
  for (const std::vector<double>& t : gemm_rank_t) {
    if (!t.empty()) res.add_gemm_alone_rank_ms(Summarize(t).median);
  }
  if (!gemm_only) *res.mutable_comm_alone() = ToProto(comm);
  res.set_host_enqueue_ms(Summarize(host_t).median);
  res.set_graph_replay(step_replayed);
  if (timeline) {
    timeline->set_enqueued_not_replayed(step_replayed);
    for (double ms : ComputeWaitByRank(*timeline, tp)) res.add_compute_wait_rank_ms(ms);
    *res.mutable_timeline() = std::move(*timeline);
  }
  if (tp > 1 && !gemm_only) {
    *res.mutable_comm_alone_nccl() = ToProto(Summarize(nccl_t));
    *res.mutable_comm_alone_p2p() = ToProto(Summarize(p2p_t));
  }
  if (tp > 1 && both) {
    const Summary beside = Summarize(beside_t);
    *res.mutable_gemm_beside_comm() = ToProto(beside);
    if (gemm.median > 0) res.set_gemm_slowdown(beside.median / gemm.median);
  }
  const double exposed = std::max(0.0, step.median - gemm.median);
  res.set_exposed_comm_ms(exposed);
  // A collective alone has nothing to hide behind: all of it is exposed.
  res.set_hidden_fraction(collective_only   ? 0.0
                          : comm.median > 0 ? 1.0 - exposed / comm.median
                                            : 1.0);
  res.set_ideal_ms(std::max(gemm.median, comm.median));
  if (step.median > 0) res.set_tflops(OpFlops(op) / (step.median * 1e-3) / 1e12);
  const auto [collective, bytes] = CollectiveBytes(op, spec.dtype);
  if (comm.median > 0) {
    res.set_algbw_gbps(AlgBwGBps(bytes, comm.median));
    res.set_busbw_gbps(BusBwGBps(collective, bytes, comm.median, tp));
  }

  res.set_tolerance(OutputTolerance(op.type, spec.dtype, tp));
  if (spec.verify) {
    run.Progress("verify", 0, 1);
    run.heat_gemm_ms = 0;  // a head start would write outputs the check must see poisoned
    RETURN_IF_ERROR(PoisonOutputs(*ctx));
    ASSIGN_OR_RETURN(std::vector<double> unused,
                     run.Timed(
                         "verify", 0, 1, [&] { return EnqueueOp(*ctx, schedule); }, "iter_end",
                         Replays(schedule.transport)));
    (void)unused;
    const absl::Time check_start = absl::Now();
    ASSIGN_OR_RETURN(Verification v, VerifyOutputs(*ctx, spec.seed, op_index));
    GetLogger("ops")->debug("{} checked against float64 in {:.0f} ms ({} rows x {} columns)", op.id,
                            absl::ToDoubleMilliseconds(absl::Now() - check_start), v.rows_checked,
                            v.cols_checked);
    res.set_verified(true);
    res.set_max_rel_error(v.max_rel_error);
    if (!(v.max_rel_error <= res.tolerance())) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "op %s (%s): verification failed: max|y-ref|/max|ref| = %.3g exceeds %.3g for %s", op.id,
          schedule.Name(), v.max_rel_error, res.tolerance(), DTypeName(spec.dtype)));
    }
  }
  return res;
}

}  // namespace

std::string TuningEnvironment(const engine::Engine& engine, int device) {
  const engine::BackendVersions v = engine.Versions();
  std::string library_env;
  for (const auto& [name, value] : LibraryEnvironment()) {
    // Where the toolkit is installed changes no schedule's speed.
    if (name == "CUDA_HOME" || name == "CUDA_PATH" || name == "CUDA_ROOT") continue;
    absl::StrAppend(&library_env, library_env.empty() ? "" : ",", name, "=", value);
  }
  return absl::StrCat("backend=", engine.Name(),
                      // Replayed and enqueued schedules tune differently (finer pieces pay
                      // once their hand-offs are cheap).
                      " graphs=", engine.ReplaysGraphs() ? "on" : "off",
                      // Ungated, NCCL's candidates carried ~0.1 ms of launch latency.
                      " gates=", engine.HasGates() ? "on" : "off",
                      // NCCL schedules run differently with an SM budget.
                      " nccl_ctas=", engine.CollectiveSmBudget(),
                      " device=", engine.GetDeviceInfo(device).name, " driver=", v.cuda_driver,
                      " cuda=", v.cuda_runtime, " nccl=", v.nccl,
                      // Schedules change between builds; so do the libraries' settings.
                      " overlapd=", OVERLAP_VERSION, "+", OVERLAP_GIT_COMMIT, " env=", library_env);
}

absl::StatusOr<v1::JobResult> RunJob(engine::Engine& engine, const JobSpec& spec,
                                     const std::vector<int>& devices, const RunHooks& hooks,
                                     TuningCache* tuning_cache) {
  ASSIGN_OR_RETURN(std::vector<int> order, TopologicalOrder(spec));
  v1::JobResult result;
  result.set_backend(engine.Name());
  result.set_launch_gate(engine.HasGates());
  if (engine.HasGates()) result.set_head_start(spec.heat_head_start ? "heat" : "idle");
  if (engine.HasGates() && spec.heat_head_start) result.set_preheat_ms(engine.PreheatMs());
  result.set_nccl_overlap_ctas(engine.CollectiveSmBudget());
  result.set_ranks_per_gpu(engine.RanksPerGpu());
  const engine::BackendVersions versions = engine.Versions();
  result.set_overlapd_version(absl::StrCat(OVERLAP_VERSION, " (", OVERLAP_GIT_COMMIT, ")"));
  if (!devices.empty()) result.set_gpu(engine.GetDeviceInfo(devices[0]).name);
  result.set_cuda_runtime(versions.cuda_runtime);
  result.set_cuda_driver(versions.cuda_driver);
  result.set_nccl(versions.nccl);
  result.set_cublas(versions.cublas);
  for (const auto& [name, value] : LibraryEnvironment())
    (*result.mutable_library_env())[name] = value;
  // A job that asked to retune ignores every choice tuned before it started
  // (and replaces it); ones its own earlier ops tuned still answer.
  const TuningUse tuning{tuning_cache, spec.retune ? absl::ToUnixMillis(absl::Now()) : 0};
  v1::JobResult header = result;  // before any op: what on_op_done gets beside each op
  double total = 0, exposed = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const OpSpec& op = spec.ops[order[i]];
    absl::StatusOr<v1::OpResult> op_result =
        RunOp(engine, spec, devices, hooks, tuning, order[i], static_cast<int>(order.size()), op);
    if (!op_result.ok()) {
      // Drain what is still queued and consume the asynchronous errors it left,
      // so that the next job on these devices starts clean; report the first error.
      const absl::Status drained = engine.Synchronize(devices);
      if (!drained.ok()) {
        GetLogger("ops")->debug("after a failed op: {}", std::string(drained.message()));
      }
      return op_result.status();
    }
    v1::OpResult r = std::move(op_result).value();
    total += r.step().median_ms();
    exposed += r.exposed_comm_ms();
    header.set_total_step_ms(total);
    header.set_total_exposed_comm_ms(exposed);
    if (hooks.on_op_done) hooks.on_op_done(header, r);
    *result.add_ops() = std::move(r);
  }
  result.set_total_step_ms(total);
  result.set_total_exposed_comm_ms(exposed);
  if (absl::Status s = TimeLayerStep(engine, spec, devices, hooks, order, &result); !s.ok()) {
    const absl::Status drained = engine.Synchronize(devices);
    if (!drained.ok()) {
      GetLogger("ops")->debug("after a failed layer step: {}", std::string(drained.message()));
    }
    return s;
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

int64_t JobBytesPerDevice(const JobSpec& spec, int tp) {
  int64_t worst = 0;
  for (const OpSpec& op : spec.ops) {
    BufferSizes sizes;
    for (const Schedule& s : CandidateSchedules(op, tp)) {
      sizes = MaxSizes(sizes, BuffersFor(op, tp, s));
    }
    // In double: absurd shapes must saturate, not wrap, so that they are refused.
    const double bytes = BufferBytes(sizes, BufferDTypesFor(op.type, spec.dtype));
    if (bytes >= 9.0e18) return std::numeric_limits<int64_t>::max();
    worst = std::max(worst, static_cast<int64_t>(bytes));
  }
  return worst;
}

}  // namespace overlap::runner
