// The run-time dispatcher of a layer step's deferred collectives (scheduler:
// dynamic): gradient all-reduces that nothing in the step waits on, cut into
// chunks and sent on each device's deferred lane (a low-priority stream with its
// own communicator) only between critical collectives.
//
// It decides, it does not enqueue: the layer step tells it what it observed
// (a deferred collective's input is ready, as its producer's event says; which
// devices have a critical collective queued or running) and the time, and asks
// which chunk goes next. The clock is the caller's, so that tests drive it by
// hand.
//
// The rules:
//  - One fixed order. Chunks go in the order the work was given (the layer
//    order), every chunk of one collective before any of the next, so that each
//    lane's communicator sees the same sequence on every rank and every node.
//    A later collective never overtakes an earlier one, even when it is ready
//    first.
//  - Ready by event. The head of the order goes only once Ready() was called.
//  - Yield to critical work. While a device of the head's group has a critical
//    collective pending, the head waits: one yield is counted per chunk that
//    had to wait, however many times it was asked.
//  - Bounded. A chunk whose deadline (ready + bound) is near (now plus the
//    chunk's expected time reaches it) goes regardless, and is counted as
//    forced: nothing starves behind a steady stream of critical work.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace overlap::runner {

// One deferred collective as the dispatcher sees it.
struct DeferredWork {
  std::string id;
  int chunks = 1;
  std::vector<int> devices;  // its group's devices
  double chunk_ms = 0;       // a chunk's expected time on its lane (what "near" adds)
};

// What happened to one deferred collective, on the dispatcher's clock.
struct DispatchRecord {
  double ready_ms = -1;        // Ready() was called; -1 = never
  double first_issued_ms = -1; // its first chunk was issued
  double last_issued_ms = -1;  // its last chunk was issued
  int issued = 0;              // chunks issued
  int yielded = 0;             // chunks that waited for critical work
  int forced = 0;              // chunks sent while critical work was pending (deadline near)
};

// Why Next() answered as it did.
enum class DispatchWait {
  kNone,      // a chunk goes (Next returned it)
  kDone,      // every chunk was issued
  kNotReady,  // the head's input is not ready yet
  kCritical,  // the head yields to critical work on one of its devices
};

struct DispatchDecision {
  int work = -1;  // the collective whose next chunk goes; -1 = none
  bool forced = false;         // it goes while critical work is pending: its deadline is near
  bool deadline_near = false;  // now plus a chunk's time reaches its deadline
  DispatchWait wait = DispatchWait::kNone;
};

class DeferredDispatcher {
 public:
  DeferredDispatcher(std::vector<DeferredWork> work, double bound_ms);

  // Collective `work`'s input is ready at `now_ms` (the first call counts).
  void Ready(int work, double now_ms);
  bool IsReady(int work) const { return records_[work].ready_ms >= 0; }

  // The next chunk to issue at `now_ms`, given which devices have a critical
  // collective queued or running. The caller issues it, then calls Issued.
  DispatchDecision Next(double now_ms, const std::function<bool(int device)>& critical_pending);
  void Issued(const DispatchDecision& decision, double now_ms);

  bool AllIssued() const { return head_ >= work_.size(); }
  // The collective whose chunk goes next, or -1 when all are issued.
  int Head() const { return AllIssued() ? -1 : static_cast<int>(head_); }
  // When the head's chunk must go at the latest; -1 when it is not ready.
  double HeadDeadlineMs() const;

  const std::vector<DeferredWork>& work() const { return work_; }
  const std::vector<DispatchRecord>& records() const { return records_; }
  double bound_ms() const { return bound_ms_; }

 private:
  void Advance();

  const std::vector<DeferredWork> work_;
  const double bound_ms_;
  std::vector<DispatchRecord> records_;
  size_t head_ = 0;
  // Whether the head's current chunk has already been counted as yielding.
  bool head_chunk_yielded_ = false;
};

}  // namespace overlap::runner
