#include "server/jobs/job_execution.h"

#include "absl/strings/str_cat.h"
#include "common/graph_parser.h"
#include "common/graph_validator.h"

namespace overlap::jobs {

absl::StatusOr<v1::JobResult> RunStoredJob(engine::Engine& engine, int max_iterations,
                                           runner::TuningCache* tuning_cache, const v1::Job& job,
                                           const runner::RunHooks& hooks) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(job.spec(), job.id());
  if (!spec.ok()) return spec.status();
  spec->devices.assign(job.devices().begin(), job.devices().end());
  ValidationLimits limits;
  limits.device_count = engine.DeviceCount();
  limits.library_algorithms = engine.LibraryAlgorithms();
  limits.max_iterations = max_iterations;
  absl::StatusOr<std::vector<int>> devices = ValidateJobSpec(*spec, limits);
  if (!devices.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no longer valid on this node: ", devices.status().message()));
  }
  return runner::RunJob(engine, *spec, *devices, hooks, tuning_cache);
}

JobRunner MakeEngineRunner(engine::Engine& engine, int max_iterations,
                           runner::TuningCache* tuning_cache) {
  return [&engine, max_iterations, tuning_cache](const v1::Job& job, const runner::RunHooks& hooks) {
    return RunStoredJob(engine, max_iterations, tuning_cache, job, hooks);
  };
}

}  // namespace overlap::jobs
