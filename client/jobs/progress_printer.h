// Draws a followed job's progress on a stream (overlapctl's stderr): one line per
// state, op or phase change, and one per op as it finishes (its schedule, step
// and hidden share, so a long job shows results before it ends); on a terminal also a live
// iteration counter that rewrites itself in place. Off a terminal (CI logs) iterations print
// nothing, so a 10,000-iteration job logs a handful of lines. Not thread-safe.
#pragma once

#include <ostream>
#include <string>

#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

class ProgressPrinter {
 public:
  ProgressPrinter(std::ostream& out, bool is_tty) : out_(out), is_tty_(is_tty) {}

  void Update(const v1::Job& job);
  // Erases a live counter, if one is shown. Call before printing anything else.
  void Finish();

 private:
  std::ostream& out_;
  bool is_tty_;
  bool counter_shown_ = false;
  bool first_ = true;
  v1::JobState state_ = v1::JOB_STATE_UNSPECIFIED;
  std::string step_key_;  // op index, op id and phase last printed
  int ops_done_ = 0;      // finished ops already printed
};

}  // namespace overlap::client
