// A job on the wire: jobs::JobRecord and its state to the API's v1::Job and
// back, field by field (its result through report_wire.h). rpc/ converts
// what it serves, peer/ what it forwards, and the job store its rows, all
// with these; lossless both ways for every job the daemon writes, summaries
// (JobSummary's) included.
//
// Pure functions; thread-safe.
#pragma once

#include <optional>

#include "overlap/v1/overlap.pb.h"
#include "server/jobs/job_record.h"

namespace overlap::wire {

v1::JobState ToProto(jobs::JobState state);
// JOB_STATE_UNSPECIFIED and unknown values read as QUEUED.
jobs::JobState FromProto(v1::JobState state);
// A filter: JOB_STATE_UNSPECIFIED is every state (nullopt).
std::optional<jobs::JobState> StateFilter(v1::JobState state);
v1::JobState ToProto(const std::optional<jobs::JobState>& filter);

v1::Job ToProto(const jobs::JobRecord& job);
jobs::JobRecord FromProto(const v1::Job& job);

}  // namespace overlap::wire
