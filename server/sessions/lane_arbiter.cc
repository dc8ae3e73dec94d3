#include "server/sessions/lane_arbiter.h"

#include <algorithm>
#include <utility>

namespace overlap::sessions {

void LaneArbiter::MakeRunnable(Queued& q, double runnable_ms) {
  q.dispatcher = std::make_unique<runner::DeferredDispatcher>(q.command.ops, q.command.bound_ms);
  for (size_t i = 0; i < q.command.ops.size(); ++i) {
    q.dispatcher->Ready(static_cast<int>(i), runnable_ms);
  }
  q.runnable_ms = runnable_ms;
}

void LaneArbiter::Add(DeferredCommand command) {
  if (command.ops.empty()) return;  // nothing to send
  Queued q;
  std::deque<Queued>& queue = sessions_[command.session];
  // Behind its session's earlier commands it is not runnable yet: its bound
  // starts once it heads the queue (Issued), so that a client posting ahead
  // does not spend its own commands' bounds on waiting for each other.
  q.command = std::move(command);
  if (queue.empty()) MakeRunnable(q, q.command.ready_ms);
  queue.push_back(std::move(q));
}

void LaneArbiter::Remove(uint64_t session) { sessions_.erase(session); }

std::optional<LaneGrant> LaneArbiter::Next(double now_ms, const LaneView& view) {
  Queued* best = nullptr;
  runner::DispatchDecision best_decision;
  bool best_full = false;
  double best_deadline = 0;
  for (auto& [session, queue] : sessions_) {
    Queued& q = queue.front();
    const runner::DispatchDecision d = q.dispatcher->Next(now_ms, view.critical_pending);
    int yields = 0;
    for (const runner::DispatchRecord& r : q.dispatcher->records()) yields += r.yielded;
    yielded_ += yields - q.yields_seen;
    if (view.yielded && yields > q.yields_seen && q.dispatcher->Head() >= 0) {
      view.yielded(q.command.ops[q.dispatcher->Head()].devices, yields - q.yields_seen);
    }
    q.yields_seen = yields;
    if (d.wait == runner::DispatchWait::kCritical && q.wait_started_ms < 0) {
      q.wait_started_ms = now_ms;
    }
    if (d.work < 0) continue;
    const std::vector<int>& devices = q.command.ops[d.work].devices;
    const bool full = std::any_of(devices.begin(), devices.end(), view.lane_full);
    if (!d.deadline_near && full) continue;
    const bool kept_short = std::any_of(devices.begin(), devices.end(), [&](int device) {
      return view.lane_full(device) && (!view.beside_critical || view.beside_critical(device));
    });
    const double deadline = q.dispatcher->HeadDeadlineMs();
    if (best == nullptr || deadline < best_deadline) {
      best = &q;
      best_decision = d;
      best_full = kept_short;
      best_deadline = deadline;
    }
  }
  if (best == nullptr) return std::nullopt;
  const int op = best_decision.work;
  const int chunks = std::max(1, best->command.ops[op].chunks);
  LaneGrant grant;
  grant.session = best->command.session;
  grant.seq = best->command.seq;
  grant.op = op;
  grant.chunk = best->dispatcher->records()[op].issued;
  grant.last = op + 1 == static_cast<int>(best->command.ops.size()) && grant.chunk + 1 == chunks;
  grant.forced = best_decision.forced;
  grant.at_bound = best_decision.forced || best_full;
  grant.waited_ms = best->wait_started_ms >= 0 ? now_ms - best->wait_started_ms : 0;
  grant.devices = best->command.ops[op].devices;
  grant.deadline_near = best_decision.deadline_near;
  grant.runnable_age_ms = now_ms - best->runnable_ms;
  return grant;
}

void LaneArbiter::Issued(const LaneGrant& grant, double now_ms) {
  auto it = sessions_.find(grant.session);
  if (it == sessions_.end()) return;
  Queued& q = it->second.front();
  if (q.command.seq != grant.seq) return;
  runner::DispatchDecision d;
  d.work = grant.op;
  d.forced = grant.forced;
  q.dispatcher->Issued(d, now_ms);
  q.wait_started_ms = -1;
  if (!q.dispatcher->AllIssued()) return;
  it->second.pop_front();
  if (it->second.empty()) {
    sessions_.erase(it);
    return;
  }
  Queued& next = it->second.front();
  MakeRunnable(next, std::max(next.command.ready_ms, now_ms));
}

double LaneArbiter::NextDeadlineMs() const {
  double earliest = -1;
  for (const auto& [session, queue] : sessions_) {
    const double deadline = queue.front().dispatcher->HeadDeadlineMs();
    if (deadline >= 0 && (earliest < 0 || deadline < earliest)) earliest = deadline;
  }
  return earliest;
}

}  // namespace overlap::sessions
