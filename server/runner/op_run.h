// OpRun: one op's context and what the job runner needs to time it: warm-up
// and timed iterations behind a barrier and a launch gate, per-rank events,
// graph replay, the heat head start, progress and cancellation. Shared by the
// per-op phases (op_phases.cc) and the whole-graph layer step (layer_step.cc).
// Each Timed call returns what it measured (TimedRun); no protobuf here.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/stats.h"
#include "common/status_macros.h"
#include "server/ops/layer_ops.h"
#include "server/runner/energy.h"
#include "server/runner/graph_replay.h"
#include "server/runner/job_runner.h"
#include "server/runner/run_hooks.h"

namespace overlap::runner {

// A timed iteration's streams wait at a launch gate until the host has enqueued
// all of it, at most this long (engine/launch_gates.h).
inline constexpr double kMaxGateHoldMs = 500;
inline constexpr size_t kHostEstimateWindow =
    3;  // iterations whose enqueue times estimate the next

// What one OpRun::Timed call measured of its timed iterations.
struct TimedRun {
  std::vector<double> times;  // per iteration: the max over ranks
  // Per rank ([rank][iteration]); empty when the iterations replayed a graph,
  // which only rank 0 times.
  std::vector<std::vector<double>> rank_times;
  // Per group of the op ([group][iteration]: the max over its ranks); one
  // group without a mesh. Empty when replayed.
  std::vector<std::vector<double>> group_times;
  double host_enqueue_ms = 0;  // median over the iterations
  bool replayed = false;       // the iterations replayed one captured graph
  EnergyWindow energy;         // over the timed iterations (energy.h); invalid without a counter
};

struct OpRun {
  engine::Engine& engine;
  const JobSpec& spec;
  const RunHooks& hooks;
  int op_index;
  int op_count;
  ops::OpContext& ctx;
  // The per-rank GEMM alone's time when timed iterations get a heat head start
  // (JobSpec::heat_head_start); 0 = none: the GPUs idle at the gate.
  double heat_gemm_ms = 0;
  // What progress names instead of the op's id (the layer step: "layer").
  std::string label = {};

  // Before a gated iteration: the op's GEMM (or a power-of-two share of its
  // rows) on every rank's compute stream, covering the host's enqueue with
  // margin, so that the GPUs start the iteration busy, as in a training loop,
  // and not rested. Power-of-two shares keep the GEMM shapes to tune few.
  absl::Status HeadStart(double host_ms) {
    if (heat_gemm_ms <= 0) return absl::OkStatus();
    const HeadStartPlan plan = PlanHeadStart(host_ms, heat_gemm_ms, ctx.op().m);
    for (int i = 0; i < plan.whole_gemms; ++i) RETURN_IF_ERROR(ops::EnqueueGemmAlone(ctx));
    return ops::EnqueueGemmAloneRows(ctx, plan.rows);
  }

  // Where the job asks for a heat head start and the engine has gates: times
  // the op's GEMM (heat_gemm_ms), then runs once every share of its rows a head
  // start may take, so that the backend picks their GEMM algorithms now. A
  // shape seen first inside a timed phase is tuned there, and tuning idles the
  // GPU: the iterations after it ran rested (a new daemon's first op read up to
  // 12% fast, fp8 on one H200: docs/PERFORMANCE.md).
  absl::Status ProbeHeat() {
    if (!spec.heat_head_start || engine.Gates() == nullptr || IsCollectiveOnly(ctx.op().type)) {
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(const TimedRun probe,
                     Timed("setup", 1, 3, [&] { return ops::EnqueueGemmAlone(ctx); }));
    heat_gemm_ms = Summarize(probe.times).median;
    for (int64_t rows : HeadStartRows(ctx.op().m)) RETURN_IF_ERROR(ops::EnqueueGemmAloneRows(ctx, rows));
    return engine.Synchronize(ctx.devices());
  }

  // The engine's PreheatMs of the op's GEMM on every rank (job_runner.h),
  // where the timed iterations get a heat head start; enqueued only: the next
  // Timed call's first sync waits for it.
  absl::Status Preheat() {
    const int gemms = PreheatGemms(engine.PreheatMs(), heat_gemm_ms);
    if (gemms > 0) Progress("preheat", 0, gemms);
    for (int i = 0; i < gemms; ++i) RETURN_IF_ERROR(ops::EnqueueGemmAlone(ctx));
    return absl::OkStatus();
  }

  void Progress(const std::string& phase, int iteration, int iterations) const {
    if (!hooks.on_progress) return;
    hooks.on_progress(runner::Progress{op_index, op_count, label.empty() ? ctx.op().id : label,
                                       phase, iteration, iterations});
  }

  // Runs `enqueue` warmup + count times; each iteration starts with a barrier
  // across the ranks, each rank times itself on its compute stream, and the
  // iteration's time is the max over ranks. Host sync only between iterations.
  // `end` is the event that ends the timed region on each rank's compute
  // stream; kIterEnd is recorded after `enqueue`, any other must be recorded by
  // `enqueue` itself.
  //
  // With `replay`, the timed iterations replay one captured after the warm-up
  // (graph_replay.h) and are timed on rank 0, whose launch stream sees the whole
  // graph finish. Where capture fails they enqueue: a backend without graphs,
  // or a GEMM shape whose algorithm is not chosen yet (no warm-up, no autotune).
  //
  // Where the engine has launch gates, each timed iteration is enqueued behind
  // one and runs once the host has enqueued all of it: the time is the GPUs',
  // as in a training loop whose host runs ahead, not the host's enqueue latency
  // (reported apart as host_enqueue_ms). Warm-up iterations run ungated: first
  // calls may set up NCCL connections, which can wait for the GPU. So do all
  // iterations without `gated`: an `enqueue` that waits for its own work to
  // run (the run-time dispatcher, dynamic_step.h) cannot sit behind a gate.
  template <typename Fn>
  absl::StatusOr<TimedRun> Timed(const std::string& phase, int warmup, int count, Fn&& enqueue,
                                 ops::EventKind end = ops::EventKind::kIterEnd,
                                 bool replay = false, bool gated = true) {
    const std::vector<int> devices = ctx.devices();
    std::vector<engine::StreamId> compute;
    for (int r = 0; r < ctx.tp(); ++r) compute.push_back(ctx.rank(r).compute);
    TimedRun run;
    std::vector<double> host_ms;
    std::vector<double> recent_host_ms;  // the last few iterations', warm-up included
    run.rank_times.assign(ctx.tp(), {});
    std::optional<engine::GraphId> graph;
    absl::Cleanup destroy_graph = [&] {
      if (graph) engine.Graphs()->DestroyGraph(*graph);
    };
    // Each iteration ends with a sync, so only the first needs one here.
    RETURN_IF_ERROR(engine.Synchronize(devices));
    const int64_t gate_timeouts = GateTimeouts(devices);
    std::optional<EnergyMeter> energy;
    for (int it = 0; it < warmup + count; ++it) {
      if (it == warmup) energy = EnergyMeter::Start(engine, devices);
      if (hooks.cancelled && hooks.cancelled()) {
        return absl::CancelledError("cancelled by request");
      }
      // A graph is timed on rank 0 only: an op of several groups (a mesh's)
      // enqueues, so that each group's ranks time themselves.
      if (replay && it == warmup && engine.Graphs() != nullptr && ctx.groups() == 1) {
        absl::StatusOr<engine::GraphId> captured = CaptureIteration(ctx, enqueue);
        if (captured.ok()) {
          graph = *captured;
        } else {
          GetLogger("ops")->debug("{} {}: enqueued, not replayed: {}", ctx.op().id, phase,
                                  captured.status().ToString());
        }
      }
      std::optional<int64_t> ticket;
      if (it >= warmup && gated && engine.Gates() != nullptr) {
        RETURN_IF_ERROR(
            HeadStart(recent_host_ms.empty()
                          ? 0
                          : *std::max_element(recent_host_ms.begin(), recent_host_ms.end())));
        ASSIGN_OR_RETURN(ticket, engine.Gates()->HoldStreams(compute, kMaxGateHoldMs));
      }
      // Opened on every path: a held stream would otherwise wait out its hold.
      absl::Cleanup open_gate = [&] {
        if (ticket) engine.Gates()->ReleaseGate(*ticket).IgnoreError();
      };
      const absl::Time host_start = absl::Now();
      // One rank has nothing to align with.
      if (ctx.tp() > 1) RETURN_IF_ERROR(engine.Barrier(/*channel=*/0, devices, compute));
      for (int r = 0; r < ctx.tp(); ++r) RETURN_IF_ERROR(ctx.Record(r, compute[r], ops::EventKind::kIterStart));
      if (graph) {
        RETURN_IF_ERROR(LaunchIteration(ctx, *graph));
      } else {
        RETURN_IF_ERROR(enqueue());
      }
      for (int r = 0; r < ctx.tp(); ++r) RETURN_IF_ERROR(ctx.Record(r, compute[r], ops::EventKind::kIterEnd));
      const double enqueue_ms = absl::ToDoubleMilliseconds(absl::Now() - host_start);
      if (it >= warmup) host_ms.push_back(enqueue_ms);
      recent_host_ms.push_back(enqueue_ms);
      if (recent_host_ms.size() > kHostEstimateWindow) recent_host_ms.erase(recent_host_ms.begin());
      std::move(open_gate).Invoke();
      RETURN_IF_ERROR(engine.Synchronize(devices));
      if (it >= warmup) RETURN_IF_ERROR(AddIterationTimes(graph.has_value(), end, run));
      Progress(phase, it + 1, warmup + count);
    }
    if (energy) run.energy = energy->Finish(count);
    run.host_enqueue_ms = host_ms.empty() ? 0 : Summarize(host_ms).median;
    run.replayed = graph.has_value();
    if (run.replayed) {
      run.rank_times.clear();
      run.group_times.clear();
    }
    if (const int64_t late = GateTimeouts(devices) - gate_timeouts; late > 0) {
      GetLogger("ops")->warn(
          "{} {}: {} launch-gate holds ran out ({} ms) before the host had enqueued the "
          "iteration; those iterations include the host's latency",
          ctx.op().id, phase, late, kMaxGateHoldMs);
    }
    return run;
  }

  // A timed iteration's times on each local rank from kIterStart to `end`
  // (rank 0 alone where it replayed a graph) into `run`: the max over them,
  // and each rank's and each group's max.
  absl::Status AddIterationTimes(bool replayed, ops::EventKind end, TimedRun& run) {
    double worst = 0;
    std::vector<double> group_worst(ctx.groups(), 0.0);
    for (int r = 0; r < (replayed ? 1 : ctx.tp()); ++r) {
      // A rank of another daemon (a job spanning nodes) is timed there.
      if (!engine.IsLocalDevice(ctx.rank(r).device)) continue;
      ASSIGN_OR_RETURN(engine::EventId start, ctx.Event(r, ops::EventKind::kIterStart));
      ASSIGN_OR_RETURN(engine::EventId stop, ctx.Event(r, end));
      ASSIGN_OR_RETURN(double ms, engine.ElapsedMs(start, stop));
      worst = std::max(worst, ms);
      double& in_group = group_worst[r / ctx.group_size()];
      in_group = std::max(in_group, ms);
      run.rank_times[r].push_back(ms);
    }
    run.times.push_back(worst);
    if (!replayed) {
      run.group_times.resize(ctx.groups());
      for (int g = 0; g < ctx.groups(); ++g) run.group_times[g].push_back(group_worst[g]);
    }
    return absl::OkStatus();
  }

  int64_t GateTimeouts(const std::vector<int>& devices) const {
    const engine::LaunchGates* gates = engine.Gates();
    int64_t total = 0;
    for (int d : devices) total += gates != nullptr ? gates->GateTimeouts(d) : 0;
    return total;
  }
};

// Copy-engine and direct-store schedules replay as graphs (where the engine has
// them: the CUDA backend unless graph_replay is off). NCCL's are enqueued: its
// communicators are non-blocking, and capturing them is not something we have
// verified.
inline bool Replays(Transport transport) { return transport != Transport::kNccl; }

}  // namespace overlap::runner
