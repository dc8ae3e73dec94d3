#include "server/runner/autotune.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/stats.h"

namespace overlap::runner {

using ops::Schedule;

Autotune::Autotune(std::vector<Schedule> candidates)
    : candidates_(std::move(candidates)),
      best_median_(candidates_.size(), std::numeric_limits<double>::infinity()),
      runoff_(candidates_.size()) {}

void Autotune::AddRound(size_t i, const std::vector<double>& samples) {
  if (samples.empty()) return;
  best_median_.at(i) = std::min(best_median_.at(i), Summarize(samples).median);
}

std::vector<size_t> Autotune::RunoffEntrants(bool with_serial) const {
  std::vector<size_t> order(candidates_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return best_median_[a] < best_median_[b]; });
  if (order.empty() || !std::isfinite(best_median_[order[0]])) return {};
  const double limit = best_median_[order[0]] * (1 + kRunoffWindow);
  std::vector<size_t> leaders;
  for (size_t i : order) {
    if (leaders.size() == kRunoffSize || best_median_[i] > limit) break;
    leaders.push_back(i);
  }
  if (leaders.size() < 2) return {};
  const int serial = SerialIndex();
  if (with_serial && serial >= 0 &&
      std::find(leaders.begin(), leaders.end(), serial) == leaders.end()) {
    leaders.push_back(serial);
  }
  return leaders;
}

void Autotune::AddRunoff(size_t i, const std::vector<double>& samples) {
  std::vector<double>& pool = runoff_.at(i);
  pool.insert(pool.end(), samples.begin(), samples.end());
}

double Autotune::Score(size_t i) const {
  return runoff_[i].empty() ? best_median_[i] : Summarize(runoff_[i]).median;
}

int Autotune::SerialIndex() const {
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (candidates_[i].mode == OverlapMode::kSerial &&
        candidates_[i].transport == Transport::kNccl) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

AutotuneChoice Autotune::Decide(bool fall_back_to_serial) const {
  // After a runoff only its entrants compete: their pooled medians and the
  // others' best-of-rounds medians are not the same kind of figure.
  std::vector<size_t> entrants;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (!runoff_[i].empty()) entrants.push_back(i);
  }
  const bool had_runoff = !entrants.empty();
  if (!had_runoff) {
    entrants.resize(candidates_.size());
    std::iota(entrants.begin(), entrants.end(), 0);
  }
  std::stable_sort(entrants.begin(), entrants.end(),
                   [&](size_t a, size_t b) { return Score(a) < Score(b); });
  const size_t best = entrants.at(0);
  AutotuneChoice choice{candidates_[best], Score(best), ""};
  const int serial = SerialIndex();
  const double serial_ms = serial >= 0 ? Score(serial) : 0;
  if (fall_back_to_serial && serial >= 0 && choice.schedule.mode != OverlapMode::kSerial &&
      choice.ms > serial_ms * (1 - kAutoMargin)) {
    choice.reason = absl::StrFormat("overlap does not pay: best %s %.3f ms vs serial %.3f ms",
                                    choice.schedule.Name(), choice.ms, serial_ms);
    choice.schedule = candidates_[serial];
    choice.ms = serial_ms;
    return choice;
  }
  // A pinned all-reduce layout must beat the transports' own (which adapt per
  // size, with no communicator of their own) by the margin too.
  if (fall_back_to_serial && choice.schedule.algorithm != AllReduceAlgorithm::kDefault) {
    for (size_t i : entrants) {  // fastest first
      if (candidates_[i].algorithm != AllReduceAlgorithm::kDefault) continue;
      if (choice.ms > Score(i) * (1 - kAutoMargin)) {
        choice.reason =
            absl::StrFormat("a pinned layout does not pay: best %s %.3f ms vs %s %.3f ms",
                            choice.schedule.Name(), choice.ms, candidates_[i].Name(), Score(i));
        choice.schedule = candidates_[i];
        choice.ms = Score(i);
        return choice;
      }
      break;
    }
  }
  choice.reason = absl::StrFormat("autotuned over %d schedules", candidates_.size());
  if (had_runoff) {
    std::vector<std::string> names;
    for (size_t i : entrants) {
      names.push_back(absl::StrFormat("%s %.3f", candidates_[i].Name(), Score(i)));
    }
    absl::StrAppend(&choice.reason, ", runoff ", absl::StrJoin(names, " / "));
  }
  absl::StrAppendFormat(&choice.reason, ": %.3f ms", choice.ms);
  if (serial >= 0) absl::StrAppendFormat(&choice.reason, " (serial %.3f ms)", serial_ms);
  return choice;
}

std::vector<CandidateScore> Autotune::Scores() const {
  std::vector<CandidateScore> out;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    out.push_back(
        {candidates_[i], best_median_[i], runoff_[i].empty() ? 0.0 : Summarize(runoff_[i]).median});
  }
  std::stable_sort(out.begin(), out.end(), [](const CandidateScore& a, const CandidateScore& b) {
    return a.best_ms < b.best_ms;
  });
  return out;
}

}  // namespace overlap::runner
