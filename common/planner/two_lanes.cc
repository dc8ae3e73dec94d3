#include "common/planner/two_lanes.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace overlap::planner {

LaneTimes RunTwoLanes(const std::vector<LaneTask>& tasks, double slowdown) {
  const int n = static_cast<int>(tasks.size());
  LaneTimes out;
  out.start_ms.assign(n, -1);
  out.end_ms.assign(n, -1);
  std::vector<double> left(n);
  for (int i = 0; i < n; ++i) left[i] = tasks[i].work_ms;
  int next[2] = {0, 0};     // the next task of each lane not yet started (by index scan)
  int running[2] = {-1, -1};
  auto next_of = [&](int lane, int from) {
    while (from < n && tasks[from].comm != (lane == 1)) ++from;
    return from;
  };
  next[0] = next_of(0, 0);
  next[1] = next_of(1, 0);
  double now = 0;
  int done = 0;
  while (done < n) {
    for (int lane = 0; lane < 2; ++lane) {
      if (running[lane] >= 0 || next[lane] >= n) continue;
      const LaneTask& t = tasks[next[lane]];
      const bool ready = std::all_of(t.deps.begin(), t.deps.end(),
                                     [&](int d) { return out.end_ms[d] >= 0; });
      if (!ready) continue;
      running[lane] = next[lane];
      out.start_ms[running[lane]] = now;
      next[lane] = next_of(lane, next[lane] + 1);
    }
    if (running[0] < 0 && running[1] < 0) break;  // waits that never end
    // A GEMM beside a transfer runs slower; a transfer runs at its own pace.
    const double rate[2] = {running[1] >= 0 ? 1.0 / slowdown : 1.0, 1.0};
    double step = std::numeric_limits<double>::infinity();
    for (int lane = 0; lane < 2; ++lane) {
      if (running[lane] >= 0) step = std::min(step, left[running[lane]] / rate[lane]);
    }
    if (!std::isfinite(step)) break;  // a task that never ends: no step to give
    now += step;
    for (int lane = 0; lane < 2; ++lane) {
      const int i = running[lane];
      if (i < 0) continue;
      left[i] -= step * rate[lane];
      if (left[i] <= 1e-9) {  // this task set the step (rounding aside)
        out.end_ms[i] = now;
        running[lane] = -1;
        ++done;
      }
    }
  }
  for (double end : out.end_ms) out.step_ms = std::max(out.step_ms, end);
  return out;
}

}  // namespace overlap::planner
