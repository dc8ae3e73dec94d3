#include "server/runner/deferred_dispatcher.h"

#include <algorithm>
#include <utility>

namespace overlap::runner {

DeferredDispatcher::DeferredDispatcher(std::vector<DeferredWork> work, double bound_ms)
    : work_(std::move(work)), bound_ms_(bound_ms), records_(work_.size()) {
  Advance();
}

void DeferredDispatcher::Ready(int work, double now_ms) {
  DispatchRecord& r = records_[work];
  if (r.ready_ms < 0) r.ready_ms = now_ms;
}

double DeferredDispatcher::HeadDeadlineMs() const {
  if (AllIssued() || !IsReady(Head())) return -1;
  return records_[head_].ready_ms + bound_ms_;
}

DispatchDecision DeferredDispatcher::Next(double now_ms,
                                          const std::function<bool(int device)>& critical_pending) {
  DispatchDecision d;
  if (AllIssued()) {
    d.wait = DispatchWait::kDone;
    return d;
  }
  const DeferredWork& head = work_[head_];
  if (!IsReady(Head())) {
    d.wait = DispatchWait::kNotReady;
    return d;
  }
  const bool pending = std::any_of(head.devices.begin(), head.devices.end(), critical_pending);
  d.deadline_near = now_ms + head.chunk_ms >= HeadDeadlineMs();
  if (!pending) {
    d.work = Head();
    return d;
  }
  if (d.deadline_near) {
    d.work = Head();
    d.forced = true;
    return d;
  }
  if (!head_chunk_yielded_) {
    head_chunk_yielded_ = true;
    ++records_[head_].yielded;
  }
  d.wait = DispatchWait::kCritical;
  return d;
}

void DeferredDispatcher::Issued(const DispatchDecision& decision, double now_ms) {
  if (decision.work < 0 || decision.work != Head()) return;
  DispatchRecord& r = records_[head_];
  if (r.issued == 0) r.first_issued_ms = now_ms;
  r.last_issued_ms = now_ms;
  ++r.issued;
  if (decision.forced) ++r.forced;
  head_chunk_yielded_ = false;
  Advance();
}

void DeferredDispatcher::Advance() {
  while (head_ < work_.size() && records_[head_].issued >= std::max(1, work_[head_].chunks)) {
    ++head_;
  }
}

}  // namespace overlap::runner
