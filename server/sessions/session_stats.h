// What the lanes count of one session while it runs, and the figures made of
// it (SessionFigures, session_lanes.h). The lanes' thread writes a
// session's counts under its box's lock, briefly; Figures() copies them under
// the lock and summarizes outside it.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/sessions/session_lanes.h"

namespace overlap::sessions {

// How many recent samples a session keeps per figure.
inline constexpr size_t kRecentSamples = 4096;

struct OpCounts {
  std::string op;
  int64_t steps = 0;
  std::deque<double> device_ms;  // recent, rank 0's
  double lane_wait_ms = 0;
  int64_t chunks = 0;
  int64_t chunks_forced = 0;
  int64_t chunks_at_bound = 0;
  double max_delay_ms = 0;
  double device_ms_total = 0;  // every sample of device_ms, not only the recent ones
  int64_t timed_steps = 0;
  int64_t over_bound = 0;  // deferred: steps completed past the session's bound
};

struct SessionCounts {
  std::string id;
  bool failed = false;
  std::string error;
  int64_t steps = 0;
  std::vector<OpCounts> ops;      // by op index
  std::deque<double> enqueue_us;  // recent: the last rank's post -> enqueued
  std::deque<double> take_us;     // recent: the last rank's post -> the lanes took the command
  // Recent, the lanes' part of the enqueue split (us): from taking the
  // command to starting it (behind the commands taken before it; a deferred
  // command: also its wait for the lane), the streams' wait for the
  // inputs-ready words (and the event after it), the wired inputs (activation
  // passes enqueued directly), and the ops' own launches (GEMMs, collectives,
  // the events around each, or one graph launch).
  std::deque<double> queued_us;
  std::deque<double> inputs_wait_us;
  std::deque<double> wired_us;
  std::deque<double> launch_us;
  int64_t taken_polling = 0;  // commands found while the lanes' thread polled the rings
  int64_t taken_woken = 0;    // commands taken after it slept in epoll
  // Op pieces enqueued as one replayed graph each (piece_graphs.h), and
  // directly (a first run, a capture that failed, graphs off or not eligible).
  int64_t pieces_replayed = 0;
  int64_t pieces_direct = 0;
};

// Appends `value` to `samples`, keeping the most recent kRecentSamples.
void AddSample(std::deque<double>& samples, double value);
// The p-th percentile (0..100) of `samples`, nearest rank; 0 for none.
double PercentileOf(const std::deque<double>& samples, double p);
// Adds one step's device time to `op`: its recent samples and its totals.
void AddDeviceTime(OpCounts& op, double ms);

// The figures of `counts`: medians and percentiles of the recent samples.
SessionFigures FiguresOf(const SessionCounts& counts);

class SessionCountsBox {
 public:
  explicit SessionCountsBox(SessionCounts counts) : counts_(std::move(counts)) {}
  template <typename Fn>
  void Update(Fn&& fn) {
    absl::MutexLock lock(&mu_);
    fn(counts_);
  }
  SessionCounts Copy() const {
    absl::MutexLock lock(&mu_);
    return counts_;
  }

 private:
  mutable absl::Mutex mu_;
  SessionCounts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap::sessions
