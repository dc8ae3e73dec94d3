// A run's report as the API's result, for the tests that read a run as a
// user does: runner::RunJob, then server/wire's mapping.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "overlap/v1/overlap.pb.h"
#include "server/runner/job_runner.h"
#include "server/wire/report_wire.h"

namespace overlap {

inline absl::StatusOr<v1::JobResult> RunJobResult(engine::Engine& engine, const JobSpec& spec,
                                                  const std::vector<int>& devices,
                                                  const runner::RunHooks& hooks,
                                                  const runner::ScheduleSource& source) {
  absl::StatusOr<runner::JobReport> report = runner::RunJob(engine, spec, devices, hooks, source);
  if (!report.ok()) return report.status();
  return wire::ToProto(*report);
}

inline absl::StatusOr<v1::JobResult> RunJobResult(engine::Engine& engine, const JobSpec& spec,
                                                  const std::vector<int>& devices,
                                                  const runner::RunHooks& hooks,
                                                  runner::TuningCache* tuning_cache) {
  return RunJobResult(engine, spec, devices, hooks, runner::ScheduleSource{nullptr, tuning_cache});
}

}  // namespace overlap
