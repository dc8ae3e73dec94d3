// What a job's run tells whoever runs it (the scheduler) as it goes, and asks
// it: progress, each op's result as it finishes, and whether to stop.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "server/engine/device_lanes.h"
#include "server/runner/job_report.h"

namespace overlap::runner {

// Where a run is: op `op_index` of `op_count` (`op_id`, or "layer" for the
// layer step), its phase (setup | autotune ... | comm_alone ... | gemm_alone ...
// | timed ... | timeline | verify | step), and the iteration within it.
struct Progress {
  int op_index = 0;
  int op_count = 0;
  std::string op_id;
  std::string phase;
  int iteration = 0;
  int iterations = 0;
};

struct RunHooks {
  // Called after every phase change and every iteration; cheap, may be null.
  std::function<void(const Progress&)> on_progress;
  // Called after each op with what it measured and the job's report so far
  // without its ops (`header`: totals, versions), so that a running job shows
  // the ops it has finished, and a failed one keeps them. Each call carries one
  // op, so that storing them costs the same per op however many came before.
  // May be null.
  std::function<void(const JobReport& header, const OpReport& op)> on_op_done;
  // Polled between iterations; when it returns true the run stops with CANCELLED.
  std::function<bool()> cancelled;
  // After the layer step's verified iteration: each op's output on each local
  // rank (`y`, its bytes as the device holds them), so that a test compares
  // one run's outputs with another's. Null in the daemon: nothing is copied.
  std::function<void(const std::string& op, int rank, std::vector<uint8_t> y)> on_layer_output;
  // The node's lanes, where the job runs beside sessions on its devices (a
  // deferred-class job; its engine then shares them: engine/lane_shared_engine.h).
  // The layer step's scheduler: dynamic shares the lanes' critical work and
  // deferred gate (dynamic_step.h). Null: the job has its devices to itself.
  engine::DeviceLanes* lanes = nullptr;
};

}  // namespace overlap::runner
