// A rank's two lanes, compute and comm, as the planner sees them: tasks run
// in their lane's order once the tasks they wait for are done, and a GEMM
// runs `slowdown` times slower while a transfer runs beside it (they share
// HBM, SMs and power). A fluid model: rates change only when a task starts or
// ends, so it advances from one such event to the next.
#pragma once

#include <vector>

namespace overlap::planner {

struct LaneTask {
  bool comm = false;      // comm lane (a transfer), else compute (a GEMM)
  double work_ms = 0;     // its time alone
  std::vector<int> deps;  // tasks (indices) it waits for
};

struct LaneTimes {
  std::vector<double> start_ms, end_ms;  // per task
  double step_ms = 0;                    // the last end
};

// Tasks of each lane run in index order. A task that waits for a later task
// of its own lane never runs: the caller builds only graphs that can finish.
LaneTimes RunTwoLanes(const std::vector<LaneTask>& tasks, double slowdown);

}  // namespace overlap::planner
