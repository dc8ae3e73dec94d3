#include "server/jobs/job_execution.h"
#include "common/status_macros.h"
#include "server/report/result_proto.h"

namespace overlap::jobs {

absl::StatusOr<v1::JobResult> RunStoredJob(engine::Engine& engine, const Admission& admission,
                                           runner::TuningCache* tuning_cache, const v1::Job& job,
                                           GraphPtr graph, const runner::RunHooks& hooks) {
  if (graph == nullptr) {
    ASSIGN_OR_RETURN(graph, admission.Revalidate(job));
  }
  return report::RunJobResult(engine, graph->spec, graph->devices, hooks, tuning_cache);
}

JobRunner MakeEngineRunner(engine::Engine& engine, const Admission& admission,
                           runner::TuningCache* tuning_cache) {
  return [&engine, &admission, tuning_cache](const v1::Job& job, const GraphPtr& graph,
                                             const runner::RunHooks& hooks) {
    return RunStoredJob(engine, admission, tuning_cache, job, graph, hooks);
  };
}

}  // namespace overlap::jobs
