#include "server/jobs/job_execution.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/engine/lane_shared_engine.h"
#include "server/flight/flight_analysis.h"
#include "server/flight/flight_engine.h"

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

namespace {

// A deferred-class job on the node's lanes: its engine calls share its
// devices with the session lanes' thread, its layer step their gate.
absl::StatusOr<runner::JobReport> RunOnSharedLanes(engine::Engine& engine,
                                                   engine::DeviceLanes& lanes,
                                                   const Admission& admission,
                                                   runner::TuningCache* tuning_cache,
                                                   const JobRecord& job, GraphPtr graph,
                                                   const runner::RunHooks& hooks) {
  if (graph == nullptr) {
    ASSIGN_OR_RETURN(graph, admission.Revalidate(job));
  }
  engine::LaneSharedEngine shared(engine, lanes, graph->devices);
  runner::RunHooks beside = hooks;
  beside.lanes = &lanes;
  return runner::RunJob(shared, graph->spec, graph->devices, beside, tuning_cache);
}

}  // namespace

namespace {

// The failures a flight verdict explains: a communicator aborted (by the
// library, a peer or the watchdog), a timeout, a lost device.
bool FlightExplains(absl::StatusCode code) {
  return code == absl::StatusCode::kAborted || code == absl::StatusCode::kDeadlineExceeded ||
         code == absl::StatusCode::kUnavailable;
}

}  // namespace

absl::Status WithFlightVerdict(const absl::Status& status, const flight::FlightRecorder& recorder,
                               const std::string& job_id) {
  if (status.ok() || !FlightExplains(status.code())) return status;
  const std::vector<flight::RankRing> rings = recorder.Snapshot(job_id);
  if (rings.empty()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(status.message(), "; ", flight::Analyze(rings).OneLine()));
}

JobRunner MakeEngineRunner(engine::Engine& engine, const Admission& admission,
                           runner::TuningCache* tuning_cache, flight::FlightRecorder* flight,
                           engine::DeviceLanes* lanes) {
  return [&engine, &admission, tuning_cache, flight, lanes](
             const JobRecord& job, const GraphPtr& graph,
             const runner::RunHooks& hooks) -> absl::StatusOr<runner::JobReport> {
    flight::ScopedFlightLabel label(job.id, "");
    absl::StatusOr<runner::JobReport> report =
        lanes != nullptr && job.priority_class == PriorityClass::kDeferred &&
                (graph == nullptr || graph->world == 0)
            ? RunOnSharedLanes(engine, *lanes, admission, tuning_cache, job, graph, hooks)
            : RunStoredJob(engine, admission, tuning_cache, job, graph, hooks);
    if (report.ok() || flight == nullptr) return report;
    return WithFlightVerdict(report.status(), *flight, job.id);
  };
}

}  // namespace overlap::jobs
