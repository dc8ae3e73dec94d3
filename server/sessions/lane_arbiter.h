// LaneArbiter: which deferred chunk of which session goes on the deferred lane
// next (session_lanes.h). It decides, it does not enqueue: the lanes tell it
// each deferred command once every rank posted it, and what the devices hold
// now (whether a critical collective of any session is queued or running on a
// device, whether a device's deferred lane already holds enough chunks), with
// the time, and ask for the next chunk. The clock is the caller's, so that
// tests drive it by hand.
//
// Each command is a runner::DeferredDispatcher of its ops (deferred_dispatcher.h),
// so the rules of scheduler: dynamic hold for every session alike:
//  - Yield to critical work: a chunk waits while a device of its group has a
//    critical collective pending (one yield counted per chunk, and the time it
//    waited summed), unless its deadline (runnable + the session's bound) is
//    near: then it goes and is counted forced. Nothing starves. A command is
//    runnable once every rank posted it and it heads its session's queue:
//    time behind the session's own earlier commands is no delay the lanes
//    caused, and a client that posts ahead would otherwise find every
//    command past its bound on arrival.
//  - One order per session: a session's chunks go in its commands' order,
//    every chunk of one op before the next, so that the deferred lane's
//    communicator sees one sequence on every rank.
//  - Between sessions, the earliest deadline first (ties: the session added
//    first), so that no deferred session starves another.
//  - A device's lane holds a few chunks at most: a chunk queued on the lane
//    cannot be called back when critical work arrives. A chunk whose deadline
//    is near goes even on a full lane.
//
// Thread safety: none; the lanes' thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "server/runner/deferred_dispatcher.h"

namespace overlap::sessions {

// One command of a deferred session as the arbiter sees it: its ops in the
// order they run, each cut into chunks over its devices.
struct DeferredCommand {
  uint64_t session = 0;  // the lanes' key: sessions added earlier have smaller keys
  uint64_t seq = 0;      // the command's sequence number, for the caller
  std::vector<runner::DeferredWork> ops;
  double ready_ms = 0;  // every rank had posted it (runnable once it heads its session's queue)
  double bound_ms = 0;  // the session's deferred_bound_ms
};

// One chunk that may go now.
struct LaneGrant {
  uint64_t session = 0;
  uint64_t seq = 0;
  int op = 0;           // index into DeferredCommand::ops
  int chunk = 0;        // index among that op's chunks
  bool last = false;    // the command's last chunk
  bool forced = false;  // it goes while critical work is pending: its deadline is near
  // It goes only because its deadline is near: past critical work (forced)
  // or onto a lane already full. A chunk that went free has this false.
  bool at_bound = false;
  double waited_ms = 0;        // how long it waited for critical work
  std::vector<int> devices;    // the op's group's devices
  bool deadline_near = false;  // now plus a chunk's time reaches its deadline
  // How long ago its command became runnable (headed its session's queue):
  // its bound runs from then.
  double runnable_age_ms = 0;
};

// What the devices hold now, as the caller observed it.
struct LaneView {
  std::function<bool(int device)> critical_pending;
  // The device's deferred lane already holds as many chunks as it should.
  std::function<bool(int device)> lane_full;
  // Whether a critical session shares the device, so that a full lane there
  // is kept short for it; may be null (always). A chunk that goes only
  // because its deadline is near onto a lane full for throughput alone is
  // not counted at its bound: it would have gone anyway.
  std::function<bool(int device)> beside_critical;
  // Chunks of an op over `devices` that began to wait for critical work; may be null.
  std::function<void(const std::vector<int>& devices, int chunks)> yielded;
};

class LaneArbiter {
 public:
  // Queues `command` behind the earlier commands of its session.
  void Add(DeferredCommand command);
  // Drops every command of `session` (it ended); their chunks never go.
  void Remove(uint64_t session);

  // The chunk that goes at `now_ms`, if any. The caller enqueues it, then
  // calls Issued with it before asking again.
  std::optional<LaneGrant> Next(double now_ms, const LaneView& view);
  void Issued(const LaneGrant& grant, double now_ms);

  bool Empty() const { return sessions_.empty(); }
  // The earliest deadline among the sessions' next chunks, -1 when none
  // waits: the caller polls again by then.
  double NextDeadlineMs() const;
  // Chunks that waited for critical work, over every command so far.
  int64_t yielded() const { return yielded_; }

 private:
  struct Queued {
    DeferredCommand command;
    // Made when the command heads its session's queue (runnable from then).
    std::unique_ptr<runner::DeferredDispatcher> dispatcher;
    double runnable_ms = -1;
    double wait_started_ms = -1;  // the head chunk first yielded; -1: it has not
    int yields_seen = 0;          // the dispatcher's yields already counted
  };
  // Gives `q` its command's dispatcher, the ops runnable from `runnable_ms`:
  // from then on its bound runs.
  static void MakeRunnable(Queued& q, double runnable_ms);

  // A session's commands, oldest first; none is empty.
  std::map<uint64_t, std::deque<Queued>> sessions_;
  int64_t yielded_ = 0;
};

}  // namespace overlap::sessions
