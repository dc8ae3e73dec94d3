// A run's report as the API's messages: the one place a job's measurements
// (runner::JobReport, runner::OpMeasurement) become a v1::JobResult and a
// v1::OpResult, a summary of timings a v1::TimingStats, and a Progress a
// v1::Progress. The runner speaks no wire type; those that do (the
// scheduler's store, the RPC services, the peer port) convert here.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "common/graph.h"
#include "common/stats.h"
#include "overlap/v1/overlap.pb.h"
#include "server/engine/engine.h"
#include "server/runner/job_report.h"
#include "server/runner/job_runner.h"
#include "server/runner/op_measurement.h"
#include "server/runner/run_hooks.h"

namespace overlap::report {

// Everything the report shows of one op: the schedule and why, step, GEMM
// alone, comm alone (each transport's), exposed and hidden communication,
// TFLOP/s, bus bandwidth, the GEMM's slowdown beside the collective, the
// timeline and the float64 check. Figures follow the op's type
// (runner::FiguresOf).
v1::OpResult ToProto(const runner::OpMeasurement& m);

// The job's result: what ran it, every op in the order they ran, the totals
// and the layer step.
v1::JobResult ToProto(const runner::JobReport& report);

v1::Timeline ToProto(const runner::Timeline& timeline);
v1::TimingStats ToProto(const Summary& s);
v1::Progress ToProto(const runner::Progress& p);

// runner::RunJob, its report as a v1::JobResult: what the scheduler stores
// and the API serves.
absl::StatusOr<v1::JobResult> RunJobResult(engine::Engine& engine, const JobSpec& spec,
                                           const std::vector<int>& devices,
                                           const runner::RunHooks& hooks,
                                           const runner::ScheduleSource& source);
inline absl::StatusOr<v1::JobResult> RunJobResult(engine::Engine& engine, const JobSpec& spec,
                                                  const std::vector<int>& devices,
                                                  const runner::RunHooks& hooks,
                                                  runner::TuningCache* tuning_cache) {
  return RunJobResult(engine, spec, devices, hooks, runner::ScheduleSource{nullptr, tuning_cache});
}

}  // namespace overlap::report
