#include "server/runner/dynamic_step.h"

#include <algorithm>
#include <array>
#include <deque>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/stats.h"
#include "common/status_macros.h"
#include "server/runner/timeline.h"

namespace overlap::runner {
namespace {

using ops::EventKind;

// Between polls that issued nothing: short against a chunk, long enough to
// leave the host backend's workers the CPU.
constexpr absl::Duration kPollInterval = absl::Microseconds(20);
// How far ahead of the deferred lane the dispatcher issues chunks, in their
// expected time: a chunk on the lane cannot be called back, so only a few go
// at once and the rules are checked again between them (at least one, at most
// kMaxChunksInFlight).
constexpr double kLaneAheadMs = 0.25;
constexpr int kMaxChunksInFlight = 8;

bool IsLocal(OpContext& ctx, int r) { return ctx.engine().IsLocalDevice(ctx.rank(r).device); }

// Deferred-lane member `m` sends its next chunk on its lane's streams; the
// first waits for the event that says its input is ready.
absl::Status SendChunk(Member& m) {
  OpContext& ctx = *m.ctx;
  const int chunk = static_cast<int>(m.sent);
  for (int q = 0; q < ctx.tp() && chunk == 0; ++q) {
    RETURN_IF_ERROR(ctx.Wait(ctx.rank(q).compute, q, EventKind::kLayerFork, 0));
  }
  if (chunk == 0) RETURN_IF_ERROR(EnqueueWiredInput(m));
  for (int q = 0; q < ctx.tp(); ++q) {
    RETURN_IF_ERROR(ctx.Record(q, ctx.rank(q).compute, EventKind::kChunkStart, chunk));
  }
  if (m.pieces.empty()) {
    RETURN_IF_ERROR(ops::EnqueueOp(ctx, m.schedule));
  } else {
    RETURN_IF_ERROR(ops::EnqueueAllReduceRows(ctx, m.schedule, m.pieces[m.sent]));
  }
  for (int q = 0; q < ctx.tp(); ++q) {
    RETURN_IF_ERROR(ctx.Record(q, ctx.rank(q).compute, EventKind::kChunkEnd, chunk));
  }
  ++m.sent;
  if (Unsent(m)) return absl::OkStatus();
  for (int q = 0; q < ctx.tp(); ++q) {
    RETURN_IF_ERROR(ctx.Record(q, ctx.rank(q).compute, EventKind::kLayerDone));
  }
  return absl::OkStatus();
}

// Whether an op on the main streams moves data between ranks: its collective
// is critical work.
bool HasCollective(const Member& m) { return m.op.type != OpType::kGemm; }

// The dispatcher's work: each deferred-lane member, whose pointer goes to `lane`.
std::vector<DeferredWork> LaneWork(std::vector<Member>& members, std::vector<Member*>* lane) {
  std::vector<DeferredWork> work;
  for (Member& m : members) {
    if (!m.on_deferred_lane) continue;
    lane->push_back(&m);
    DeferredWork& w = work.emplace_back();
    w.id = m.op.id;
    w.chunks = Pieces(m);
    for (int q = 0; q < m.ctx->tp(); ++q) {
      if (IsLocal(*m.ctx, q)) w.devices.push_back(m.ctx->rank(q).device);
    }
    w.chunk_ms = BesideGemmsOf(m) * m.alone_ms / w.chunks;
  }
  return work;
}

// Whether the event at the member's place completed on every local rank.
absl::StatusOr<bool> InputReady(OpContext& ctx) {
  for (int q = 0; q < ctx.tp(); ++q) {
    if (!IsLocal(ctx, q)) continue;
    ASSIGN_OR_RETURN(const engine::EventId event, ctx.Event(q, EventKind::kLayerFork, 0));
    ASSIGN_OR_RETURN(const bool done, ctx.engine().EventDone(event));
    if (!done) return false;
  }
  return true;
}

// One dispatched iteration's bookkeeping on the host.
class LiveDispatch {
 public:
  LiveDispatch(std::vector<Member>& members, double bound_ms, TimelineEngine* tracer,
               engine::DeviceLanes* lanes)
      : dispatcher_(LaneWork(members, &lane_), bound_ms),
        reached_(lane_.size()),
        yields_seen_(lane_.size()),
        tracer_(tracer),
        lanes_(lanes) {}
  // Critical work the node's lanes still count as this step's is over for them.
  ~LiveDispatch() {
    for (int device : registered_) lanes_->CriticalEnd(device, engine::LaneUser::kJob);
  }
  LiveDispatch(const LiveDispatch&) = delete;
  LiveDispatch& operator=(const LiveDispatch&) = delete;

  // The main streams reached deferred member `lane_index`'s place: its input
  // is ready once they get there.
  absl::Status Reached(int lane_index, const MainStreams& main) {
    OpContext& ctx = *lane_[lane_index]->ctx;
    for (int q = 0; q < ctx.tp(); ++q) {
      RETURN_IF_ERROR(ctx.Record(q, main.at(ctx.rank(q).device), EventKind::kLayerFork, 0));
    }
    reached_[lane_index] = true;
    return absl::OkStatus();
  }

  // Critical work enqueued: on each local rank of `ctx`, it is queued on the
  // device once `start` completes (the main streams reached it) and over once
  // `done` does.
  absl::Status Critical(OpContext& ctx, EventKind start, EventKind done) {
    for (int q = 0; q < ctx.tp(); ++q) {
      if (!IsLocal(ctx, q)) continue;
      CriticalWork& c = critical_.emplace_back();
      c.device = ctx.rank(q).device;
      ASSIGN_OR_RETURN(c.start, ctx.Event(q, start));
      ASSIGN_OR_RETURN(c.done, ctx.Event(q, done));
    }
    return absl::OkStatus();
  }

  // Observes the events, then issues every chunk the dispatcher lets go now.
  // Returns how many it issued.
  absl::StatusOr<int> Poll(engine::Engine& engine);

  // Polls until every chunk is out. A ready chunk goes by its deadline at the
  // latest, so only a wait for an input (or for the lane) can last: past
  // kDispatchReadyTimeout beyond the bound, the step fails.
  absl::Status Drain(engine::Engine& engine);

  const std::vector<DispatchRecord>& records() const { return dispatcher_.records(); }

 private:
  // The chunks issued and not yet seen finished on every local rank.
  absl::StatusOr<int> ChunksInFlight(engine::Engine& engine) {
    while (!in_flight_.empty()) {
      for (engine::EventId event : in_flight_.front()) {
        ASSIGN_OR_RETURN(const bool done, engine.EventDone(event));
        if (!done) return static_cast<int>(in_flight_.size());
      }
      in_flight_.pop_front();
    }
    return 0;
  }

  // The chunk `m` just sent: its end events.
  absl::Status TrackChunk(Member& m) {
    OpContext& ctx = *m.ctx;
    std::vector<engine::EventId>& ends = in_flight_.emplace_back();
    for (int q = 0; q < ctx.tp(); ++q) {
      if (!IsLocal(ctx, q)) continue;
      ASSIGN_OR_RETURN(ends.emplace_back(),
                       ctx.Event(q, EventKind::kChunkEnd, static_cast<int>(m.sent) - 1));
    }
    return absl::OkStatus();
  }

  double NowMs() const { return absl::ToDoubleMilliseconds(absl::Now() - start_); }

  // The node's lanes learn which devices have this step's critical work
  // pending (`pending`), so that sessions' deferred chunks yield to it.
  void Publish(const std::set<int>& pending) {
    if (lanes_ == nullptr) return;
    for (auto it = registered_.begin(); it != registered_.end();) {
      if (pending.count(*it) > 0) {
        ++it;
        continue;
      }
      lanes_->CriticalEnd(*it, engine::LaneUser::kJob);
      it = registered_.erase(it);
    }
    for (int device : pending) {
      if (registered_.insert(device).second) {
        lanes_->CriticalBegin(device, engine::LaneUser::kJob);
      }
    }
  }
  // Chunks that began to wait for critical work since the last call, to the
  // node's lanes: for a session's where none of the step's own (`pending`)
  // was pending on the chunk's devices.
  void CountYields(const std::set<int>& pending) {
    if (lanes_ == nullptr) return;
    for (size_t k = 0; k < lane_.size(); ++k) {
      const int yielded = dispatcher_.records()[k].yielded;
      if (yielded == yields_seen_[k]) continue;
      const std::vector<int>& devices = dispatcher_.work()[k].devices;
      const bool own =
          std::any_of(devices.begin(), devices.end(), [&](int d) { return pending.count(d) > 0; });
      lanes_->CountYields(devices, engine::LaneUser::kJob, yielded - yields_seen_[k], !own);
      yields_seen_[k] = yielded;
    }
  }

  std::vector<Member*> lane_;  // before dispatcher_: LaneWork() fills it
  DeferredDispatcher dispatcher_;
  std::vector<bool> reached_;
  std::vector<int> yields_seen_;  // by lane member: its yields already told the node's lanes
  std::deque<std::vector<engine::EventId>> in_flight_;  // each chunk's end events, oldest first
  TimelineEngine* tracer_;                              // null: not traced
  // The node's lanes, where the job runs beside sessions; null: alone.
  engine::DeviceLanes* lanes_;
  std::set<int> registered_;  // devices whose critical work the node's lanes count as ours
  struct CriticalWork {
    int device = 0;
    engine::EventId start = engine::kNoEvent, done = engine::kNoEvent;
  };
  std::vector<CriticalWork> critical_;  // not yet seen done
  const absl::Time start_ = absl::Now();
};

absl::StatusOr<int> LiveDispatch::Poll(engine::Engine& engine) {
  const double now = NowMs();
  for (size_t k = 0; k < lane_.size(); ++k) {
    if (!reached_[k] || dispatcher_.IsReady(static_cast<int>(k))) continue;
    ASSIGN_OR_RETURN(const bool ready, InputReady(*lane_[k]->ctx));
    if (ready) dispatcher_.Ready(static_cast<int>(k), now);
  }
  // Critical work is pending on a device from when its streams reach it
  // until it is done: work the host enqueued further ahead does not hold the
  // deferred lane back yet, or nothing deferred would go before the step's
  // last collective.
  std::vector<CriticalWork> left;
  std::set<int> pending;
  for (const CriticalWork& c : critical_) {
    ASSIGN_OR_RETURN(const bool done, engine.EventDone(c.done));
    if (done) continue;
    left.push_back(c);
    ASSIGN_OR_RETURN(const bool reached, engine.EventDone(c.start));
    if (reached) pending.insert(c.device);
  }
  critical_ = std::move(left);
  Publish(pending);
  // A session's critical work on the device holds this job's chunks back too.
  auto critical_pending = [&](int device) {
    return pending.count(device) > 0 ||
           (lanes_ != nullptr && lanes_->CriticalPendingOf(device, engine::LaneUser::kSession));
  };
  int issued = 0;
  for (DispatchDecision d = dispatcher_.Next(now, critical_pending); d.work >= 0;
       d = dispatcher_.Next(now, critical_pending)) {
    ASSIGN_OR_RETURN(const int in_flight, ChunksInFlight(engine));
    const double chunk_ms = dispatcher_.work()[d.work].chunk_ms;
    const int ahead = std::clamp(static_cast<int>(kLaneAheadMs / std::max(chunk_ms, 1e-6)), 1,
                                 kMaxChunksInFlight);
    // A chunk whose deadline is near goes now, critical work or not.
    if (in_flight >= ahead && !d.deadline_near) break;
    // The node's gate has the last word: critical work that a session queued
    // since the dispatcher looked holds the chunk back too.
    if (lanes_ != nullptr &&
        !lanes_->PassDeferred(dispatcher_.work()[d.work].devices, engine::LaneUser::kJob,
                              d.deadline_near || d.forced)) {
      break;
    }
    // A chunk's spans are its collective's, whatever op the main streams are at.
    const std::string label = tracer_ != nullptr ? tracer_->label() : "";
    if (tracer_ != nullptr) tracer_->SetLabel(lane_[d.work]->op.id);
    RETURN_IF_ERROR(SendChunk(*lane_[d.work]));
    if (tracer_ != nullptr) tracer_->SetLabel(label);
    RETURN_IF_ERROR(TrackChunk(*lane_[d.work]));
    dispatcher_.Issued(d, now);
    ++issued;
  }
  CountYields(pending);
  return issued;
}

absl::Status LiveDispatch::Drain(engine::Engine& engine) {
  const absl::Duration limit = kDispatchReadyTimeout + absl::Milliseconds(dispatcher_.bound_ms());
  absl::Time progress = absl::Now();
  while (!dispatcher_.AllIssued()) {
    ASSIGN_OR_RETURN(const int issued, Poll(engine));
    if (issued > 0) {
      progress = absl::Now();
      continue;
    }
    if (absl::Now() - progress > limit) {
      const int head = dispatcher_.Head();
      return absl::DeadlineExceededError(absl::StrCat(
          "layer step: deferred collective ", dispatcher_.work()[head].id, " waited ",
          absl::FormatDuration(limit),
          dispatcher_.IsReady(head) ? " for its deferred lane: its earlier chunks did not finish"
                                    : " for its input: the work before it did not finish"));
    }
    absl::SleepFor(kPollInterval);
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<int> LaneReadyPoints(const std::vector<Member>& members) {
  std::map<std::string, int> index_of;
  for (size_t i = 0; i < members.size(); ++i) index_of[members[i].op.id] = static_cast<int>(i);
  std::vector<int> points;
  for (size_t i = 0; i < members.size(); ++i) {
    const Member& m = members[i];
    if (!m.on_deferred_lane) continue;
    std::vector<std::string> waits_on = m.op.after;
    if (!m.op.input.empty()) waits_on.push_back(m.op.input);
    int point = -1;
    for (const std::string& id : waits_on) {
      const auto it = index_of.find(id);
      // Not a member of its own, or on the side streams: its own place.
      if (it == index_of.end() || members[it->second].deferred ||
          it->second > static_cast<int>(i)) {
        point = static_cast<int>(i);
        break;
      }
      point = std::max(point, it->second);
    }
    points.push_back(point);
  }
  return points;
}

absl::StatusOr<std::vector<DispatchRecord>> EnqueueLayerDynamic(std::vector<Member>& members,
                                                                OpContext& main, double bound_ms,
                                                                TimelineEngine* tracer,
                                                                engine::DeviceLanes* lanes) {
  const MainStreams streams = MainStreamsOf(main);
  for (Member& m : members) m.sent = 0;
  LiveDispatch live(members, bound_ms, tracer, lanes);
  engine::Engine& engine = main.engine();
  const std::vector<int> ready_points = LaneReadyPoints(members);
  // Each lane member's ready event once the main streams pass its ready point.
  auto reach_after = [&](int point) -> absl::Status {
    for (size_t k = 0; k < ready_points.size(); ++k) {
      if (ready_points[k] == point) RETURN_IF_ERROR(live.Reached(static_cast<int>(k), streams));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(reach_after(-1));
  for (size_t i = 0; i < members.size(); ++i) {
    Member& m = members[i];
    if (tracer != nullptr) tracer->SetLabel(m.op.id);
    RETURN_IF_ERROR(JoinBefore(members, m.op.id, streams));
    if (m.on_deferred_lane) {
      // Reached at its ready point: after its producer, or here (below).
    } else if (m.deferred) {  // a critical collective on the side streams
      RETURN_IF_ERROR(SendDeferred(m, streams));
      RETURN_IF_ERROR(live.Critical(*m.ctx, EventKind::kLayerFork, EventKind::kLayerDone));
    } else {
      RETURN_IF_ERROR(EnqueueWiredInput(m));
      OpContext& ctx = *m.ctx;
      const bool critical = HasCollective(m);
      for (int q = 0; q < ctx.tp() && critical; ++q) {
        RETURN_IF_ERROR(ctx.Record(q, streams.at(ctx.rank(q).device), EventKind::kCriticalStart));
      }
      RETURN_IF_ERROR(ops::EnqueueOp(ctx, m.schedule));
      for (int q = 0; q < ctx.tp() && critical; ++q) {
        RETURN_IF_ERROR(ctx.Record(q, streams.at(ctx.rank(q).device), EventKind::kCriticalDone));
      }
      if (critical) {
        RETURN_IF_ERROR(live.Critical(ctx, EventKind::kCriticalStart, EventKind::kCriticalDone));
      }
    }
    RETURN_IF_ERROR(reach_after(static_cast<int>(i)));
    RETURN_IF_ERROR(live.Poll(engine).status());
  }
  RETURN_IF_ERROR(live.Drain(engine));
  RETURN_IF_ERROR(JoinBefore(members, "", streams));
  return live.records();
}

namespace {

// Milliseconds from `start` to event (kind, index) of `ctx`'s rank q.
absl::StatusOr<double> Since(engine::EventId start, OpContext& ctx, int q, EventKind kind,
                             int index = 0) {
  ASSIGN_OR_RETURN(const engine::EventId event, ctx.Event(q, kind, index));
  return ctx.engine().ElapsedMs(start, event);
}

struct Interval {
  double begin = 0, end = 0;
};

double Overlap(const Interval& a, const Interval& b) {
  return std::max(0.0, std::min(a.end, b.end) - std::max(a.begin, b.begin));
}

// One dispatched iteration's device-clock figures.
struct IterationFigures {
  // By deferred-lane member: ready, first chunk, finished (latest rank).
  std::vector<std::array<double, 3>> deferral;
  std::map<int, double> inversion_ms, busy_ms;  // by device
};

absl::StatusOr<IterationFigures> ReadIteration(std::vector<Member>& members, OpContext& main) {
  std::map<int, engine::EventId> start;  // by device: the iteration's start
  for (int r = 0; r < main.tp(); ++r) {
    if (!IsLocal(main, r)) continue;
    ASSIGN_OR_RETURN(start[main.rank(r).device], main.Event(r, EventKind::kIterStart));
  }
  IterationFigures f;
  std::map<int, std::vector<Interval>> chunks, critical;  // by device
  for (Member& m : members) {
    OpContext& ctx = *m.ctx;
    const bool side_critical = m.deferred && !m.on_deferred_lane;
    if (!m.on_deferred_lane && !side_critical && !HasCollective(m)) continue;
    std::array<double, 3> latest = {0, 0, 0};
    for (int q = 0; q < ctx.tp(); ++q) {
      if (!IsLocal(ctx, q)) continue;
      const int device = ctx.rank(q).device;
      const engine::EventId s = start.at(device);
      if (!m.on_deferred_lane) {
        Interval i;
        ASSIGN_OR_RETURN(
            i.begin,
            Since(s, ctx, q, side_critical ? EventKind::kLayerFork : EventKind::kCriticalStart));
        ASSIGN_OR_RETURN(
            i.end,
            Since(s, ctx, q, side_critical ? EventKind::kLayerDone : EventKind::kCriticalDone));
        critical[device].push_back(i);
        continue;
      }
      ASSIGN_OR_RETURN(const double ready, Since(s, ctx, q, EventKind::kLayerFork));
      ASSIGN_OR_RETURN(const double first, Since(s, ctx, q, EventKind::kChunkStart, 0));
      ASSIGN_OR_RETURN(const double done, Since(s, ctx, q, EventKind::kLayerDone));
      latest = {std::max(latest[0], ready), std::max(latest[1], first), std::max(latest[2], done)};
      for (int c = 0; c < Pieces(m); ++c) {
        Interval i;
        ASSIGN_OR_RETURN(i.begin, Since(s, ctx, q, EventKind::kChunkStart, c));
        ASSIGN_OR_RETURN(i.end, Since(s, ctx, q, EventKind::kChunkEnd, c));
        chunks[device].push_back(i);
      }
    }
    if (m.on_deferred_lane) f.deferral.push_back(latest);
  }
  for (const auto& [device, s] : start) {
    double inversion = 0, busy = 0;
    for (const Interval& c : chunks[device]) {
      busy += c.end - c.begin;
      for (const Interval& k : critical[device]) inversion += Overlap(c, k);
    }
    f.inversion_ms[device] = inversion;
    f.busy_ms[device] = busy;
  }
  return f;
}

}  // namespace

absl::StatusOr<DispatchFigures> MeasureDispatch(std::vector<Member>& members, OpContext& main,
                                                double bound_ms, int iterations,
                                                std::vector<LayerDeferral> deferrals,
                                                engine::DeviceLanes* lanes) {
  engine::Engine& engine = main.engine();
  const std::vector<int> devices = main.devices();
  std::vector<IterationFigures> figures;
  std::vector<std::vector<DispatchRecord>> records;
  for (int it = 0; it < iterations; ++it) {
    RETURN_IF_ERROR(engine.Synchronize(devices));
    for (int r = 0; r < main.tp(); ++r) {
      RETURN_IF_ERROR(main.Record(r, main.rank(r).compute, EventKind::kIterStart));
    }
    ASSIGN_OR_RETURN(records.emplace_back(),
                     EnqueueLayerDynamic(members, main, bound_ms, nullptr, lanes));
    RETURN_IF_ERROR(engine.Synchronize(devices));
    ASSIGN_OR_RETURN(figures.emplace_back(), ReadIteration(members, main));
  }
  DispatchFigures out{std::move(deferrals), {}, iterations};
  size_t k = 0;
  for (LayerDeferral& d : out.deferrals) {
    if (k >= figures.front().deferral.size()) break;
    if (!d.dispatched) continue;
    std::vector<double> ready, first, finished;
    d.worst_delay_ms = 0;
    for (size_t it = 0; it < figures.size(); ++it) {
      const std::array<double, 3>& f = figures[it].deferral[k];
      ready.push_back(f[0]);
      first.push_back(f[1]);
      finished.push_back(f[2]);
      d.worst_delay_ms = std::max(d.worst_delay_ms, f[2] - f[0]);
      d.chunks_yielded += records[it][k].yielded;
      d.chunks_forced += records[it][k].forced;
    }
    d.ready_ms = Summarize(ready).median;
    d.first_chunk_ms = Summarize(first).median;
    d.finished_ms = Summarize(finished).median;
    d.bound_ms = bound_ms;
    ++k;
  }
  for (const auto& [device, unused] : figures.front().inversion_ms) {
    std::vector<double> inversion, busy;
    for (const IterationFigures& f : figures) {
      inversion.push_back(f.inversion_ms.at(device));
      busy.push_back(f.busy_ms.at(device));
    }
    out.lanes.push_back(LaneFigures{device, Summarize(inversion).median, Summarize(busy).median});
  }
  return out;
}

}  // namespace overlap::runner
