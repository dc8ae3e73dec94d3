#include "server/runner/traced_iteration.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "common/status_macros.h"

namespace overlap::runner {

using ops::OpContext;

absl::StatusOr<Timeline> TraceIteration(
    OpRun& run, const std::vector<OpContext*>& contexts,
    absl::FunctionRef<absl::Status(TimelineEngine&)> enqueue, bool gated) {
  OpContext& main = run.ctx;
  std::vector<TimelineLane> lanes;
  std::set<engine::StreamId> seen;
  auto add = [&](engine::StreamId stream, int rank, int device, const char* name) {
    if (seen.insert(stream).second) lanes.push_back(TimelineLane{stream, rank, device, name});
  };
  // A lane's rank is main's rank on its device: in a mesh the contexts order
  // their ranks by their own groups.
  std::map<int, int> rank_of_device;
  for (int r = 0; r < main.tp(); ++r) {
    rank_of_device[main.rank(r).device] = r;
    add(main.rank(r).compute, r, main.rank(r).device, "compute");
    add(main.rank(r).comm, r, main.rank(r).device, "comm");
  }
  for (OpContext* ctx : contexts) {
    for (int q = 0; q < ctx->tp(); ++q) {
      const int device = ctx->rank(q).device;
      const char* lane = ctx->channel() == engine::kDeferredLaneChannel ? "deferred" : "side";
      add(ctx->rank(q).compute, rank_of_device[device], device, lane);
      add(ctx->rank(q).comm, rank_of_device[device], device, lane);
    }
  }
  TimelineEngine tracer(run.engine, std::move(lanes));
  // Traced twice, kept once: the first (warm-up) tells the head start of the
  // second how long a traced enqueue takes, so the GPUs do not idle through it.
  ASSIGN_OR_RETURN(const TimedRun step, run.Timed("timeline", 1, 1, [&] {
    tracer.Clear();
    std::vector<engine::Engine*> own;
    for (OpContext* ctx : contexts) own.push_back(ctx->UseEngine(&tracer));
    absl::Status enqueued = enqueue(tracer);
    for (size_t i = 0; i < contexts.size(); ++i) contexts[i]->UseEngine(own[i]);
    return enqueued;
  }, ops::EventKind::kIterEnd, /*replay=*/false, gated));
  std::vector<engine::EventId> origin;
  for (int r = 0; r < main.tp(); ++r) {
    ASSIGN_OR_RETURN(engine::EventId start, main.Event(r, ops::EventKind::kIterStart));
    origin.push_back(start);
  }
  Timeline timeline;
  ASSIGN_OR_RETURN(timeline.spans, tracer.Collect(origin));
  timeline.step_ms = step.times.empty() ? 0 : step.times.front();
  return timeline;
}

std::vector<double> ComputeWaitByRank(const Timeline& timeline, int ranks) {
  std::vector<double> end(ranks, 0.0), busy(ranks, 0.0), wait(ranks, 0.0);
  for (const TimelineSpan& s : timeline.spans) {
    if (s.rank < 0 || s.rank >= ranks) continue;
    end[s.rank] = std::max(end[s.rank], s.end_ms);
    if (s.lane == "compute") busy[s.rank] += s.end_ms - s.start_ms;
  }
  for (int r = 0; r < ranks; ++r) wait[r] = std::max(0.0, end[r] - busy[r]);
  return wait;
}

}  // namespace overlap::runner
