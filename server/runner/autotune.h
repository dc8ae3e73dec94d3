// Autotune's tally: which schedule `auto` picks from the timings the job runner
// takes. Pure bookkeeping, no engine: the runner times, this decides.
//
// Two stages. First, round-robin rounds over every candidate (every other round
// in reverse, so that none always runs first or last); each keeps its best
// median (the SM clock drifts within seconds, and a single pass would favour
// whichever candidates ran while it was high). The best medians of the leaders
// are often within a few percent of each other, and a best-of-two median is a
// noisy figure: alone it picked a schedule 5% slower than the runner-up on
// H200s. So, second, a runoff: the leaders (within kRunoffWindow of the best,
// at most kRunoffSize) run again in interleaved rounds, and the pooled median of
// those samples decides. Serial over NCCL runs in the runoff too wherever it is
// the fallback: the runoff comes seconds later, often at a lower SM clock, and
// its medians measured against serial's stage-one figure once made `auto` fall
// back to serial on shapes where overlap won by 11%.
#pragma once

#include <string>
#include <vector>

#include "common/schedule.h"

namespace overlap::runner {

struct AutotuneChoice {
  ops::Schedule schedule;
  double ms = 0;  // the figure that chose it (runoff median, else best median)
  std::string reason;
};

// What autotune measured of one candidate.
struct CandidateScore {
  ops::Schedule schedule;
  double best_ms = 0;    // best median over the stage-one rounds (+inf: never timed)
  double runoff_ms = 0;  // pooled runoff median; 0 when it was not in the runoff
};

class Autotune {
 public:
  static constexpr double kRunoffWindow = 0.06;  // leaders: within 6% of the best
  static constexpr size_t kRunoffSize = 3;
  // Overlap must beat serial by this much for `auto` to choose it.
  static constexpr double kAutoMargin = 0.02;

  // `candidates` as CandidateSchedules returns them (serial over NCCL first
  // when the op is auto).
  explicit Autotune(std::vector<ops::Schedule> candidates);

  const std::vector<ops::Schedule>& candidates() const { return candidates_; }

  // Stage one: one round's samples of candidate `i`.
  void AddRound(size_t i, const std::vector<double>& samples);

  // The candidates worth a runoff, best first, then serial over NCCL if
  // `with_serial` (it is the fallback) and it is not among them; empty when the
  // best stands alone (no other candidate within the window) or stage one has
  // no samples.
  std::vector<size_t> RunoffEntrants(bool with_serial) const;

  // Stage two: samples of leader `i`, pooled over the runoff's rounds.
  void AddRunoff(size_t i, const std::vector<double>& samples);

  // The winner. With `fall_back_to_serial` (mode auto), a winner that does not
  // beat serial over NCCL by kAutoMargin gives way to it, and an all-reduce
  // layout pinned by `algorithm` that does not beat the fastest of the
  // transports' own by kAutoMargin gives way to that.
  AutotuneChoice Decide(bool fall_back_to_serial) const;

  // Every candidate's figures, by stage-one best median (fastest first), so that
  // users see by how much each schedule lost at their shape.
  std::vector<CandidateScore> Scores() const;

 private:
  // The figure candidate `i` is judged by: its runoff median if it ran one,
  // else its best stage-one median.
  double Score(size_t i) const;
  int SerialIndex() const;  // serial over NCCL, or -1

  std::vector<ops::Schedule> candidates_;
  std::vector<double> best_median_;          // stage one, +inf until timed
  std::vector<std::vector<double>> runoff_;  // stage two, pooled
};

}  // namespace overlap::runner
