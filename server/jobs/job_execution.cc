#include "server/jobs/job_execution.h"

#include "common/status_macros.h"

namespace overlap::jobs {

absl::StatusOr<runner::JobReport> RunStoredJob(engine::Engine& engine, const Admission& admission,
                                               runner::TuningCache* tuning_cache,
                                               const JobRecord& job, GraphPtr graph,
                                               const runner::RunHooks& hooks) {
  if (graph == nullptr) {
    ASSIGN_OR_RETURN(graph, admission.Revalidate(job));
  }
  return runner::RunJob(engine, graph->spec, graph->devices, hooks, tuning_cache);
}

JobRunner MakeEngineRunner(engine::Engine& engine, const Admission& admission,
                           runner::TuningCache* tuning_cache) {
  return [&engine, &admission, tuning_cache](const JobRecord& job, const GraphPtr& graph,
                                             const runner::RunHooks& hooks) {
    return RunStoredJob(engine, admission, tuning_cache, job, graph, hooks);
  };
}

}  // namespace overlap::jobs
