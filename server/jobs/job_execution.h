// The job queue's JobRunner for real engines: runs a job's admitted graph
// with runner::RunJob; a job queued before a restart has none, and its stored
// spec is checked again (Admission::Revalidate) first.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "server/engine/device_lanes.h"
#include "server/engine/engine.h"
#include "server/flight/flight_recorder.h"
#include "server/jobs/admission.h"
#include "server/jobs/job_queue.h"
#include "server/runner/job_runner.h"

namespace overlap::jobs {

// A job queued before a restart is validated again because it may meet a
// different backend (fewer devices, another max_iterations): it then fails
// with INVALID_ARGUMENT instead of running on devices that do not exist.
absl::StatusOr<runner::JobReport> RunStoredJob(engine::Engine& engine, const Admission& admission,
                                               runner::TuningCache* tuning_cache,
                                               const JobRecord& job, GraphPtr graph,
                                               const runner::RunHooks& hooks);

// RunStoredJob bound to an engine, admission and cache (all must outlive the runner).
// With a flight recorder (the one the engine's flight::FlightEngine writes),
// the job's collectives carry its id, and a job that aborts or times out gets
// the recorder's verdict ("flight: collective #7 all_gather ... not finished
// on 1") appended to its error, for `overlapctl get`.
//
// With the node's lanes (`lanes`, shared with the session lanes), a job of
// priority_class deferred runs on a LaneSharedEngine over its devices and
// hands the lanes to its layer step (RunHooks::lanes), so that it may run
// beside sessions (JobQueueOptions::deferred_beside_sessions); a critical job
// runs on `engine` alone, its devices its own.
JobRunner MakeEngineRunner(engine::Engine& engine, const Admission& admission,
                           runner::TuningCache* tuning_cache,
                           flight::FlightRecorder* flight = nullptr,
                           engine::DeviceLanes* lanes = nullptr);

// `status` with the flight verdict on the rings of `job_id` appended, when
// the code is one a hang or abort gives (ABORTED, DEADLINE_EXCEEDED,
// UNAVAILABLE) and the recorder holds collectives of that job.
absl::Status WithFlightVerdict(const absl::Status& status, const flight::FlightRecorder& recorder,
                               const std::string& job_id);

}  // namespace overlap::jobs
