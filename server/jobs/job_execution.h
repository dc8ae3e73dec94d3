// The job queue's JobRunner for real engines: runs a job's admitted graph
// with runner::RunJob; a job queued before a restart has none, and its stored
// spec is checked again (Admission::Revalidate) first.
#pragma once

#include "absl/status/statusor.h"
#include "server/engine/engine.h"
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
JobRunner MakeEngineRunner(engine::Engine& engine, const Admission& admission,
                           runner::TuningCache* tuning_cache);

}  // namespace overlap::jobs
