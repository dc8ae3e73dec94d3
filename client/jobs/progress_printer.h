// Draws a followed job's progress on a stream (overlapctl's stderr): one line per
// state, op or phase change, and one per op as it finishes (its schedule, step
// and hidden share, so a long job shows results before it ends); on a terminal
// also a live iteration counter that rewrites itself in place. Off a terminal
// (CI logs) iterations print nothing and each kind of phase prints once per op
// (not once per repeat: "timed 1/4", "timed 2/4", ...; autotune once, not per
// round or candidate), so a long job logs a dozen lines an op. Each phase line
// says how long the job has run and, once an op has finished, about how long is
// left (the ops so far, timed, times the ops to come). Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <set>
#include <string>

#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

// --quiet: every ProgressPrinter made after this prints nothing (and commands
// leave out their other progress lines: "submitted job ...").
void SetQuietProgress(bool quiet);
bool QuietProgress();
// Where a command writes a progress line of its own ("check: GEMM on 2 GPU(s)"):
// `err`, or under --quiet a stream that drops it.
std::ostream& ProgressStream(std::ostream& err);

class ProgressPrinter {
 public:
  // `now_ms`: the unix time in milliseconds (tests pass a fake clock).
  ProgressPrinter(std::ostream& out, bool is_tty, std::function<int64_t()> now_ms = nullptr);

  void Update(const v1::Job& job);
  // Erases a live counter, if one is shown. Call before printing anything else.
  void Finish();

 private:
  // "; 12 s elapsed, about 30 s left" for a job that started; "" otherwise.
  std::string Timing(const v1::Job& job) const;

  std::ostream& out_;
  bool is_tty_;
  bool quiet_;
  std::function<int64_t()> now_ms_;
  bool counter_shown_ = false;
  bool first_ = true;
  v1::JobState state_ = v1::JOB_STATE_UNSPECIFIED;
  std::string step_key_;  // op index, op id and phase last printed
  std::set<std::string> phases_shown_;  // off a terminal: op index, op id and phase kind
  int ops_done_ = 0;      // finished ops already printed
  int64_t last_op_done_ms_ = 0;  // when the newest of them was seen finished
};

}  // namespace overlap::client
