// The job queue's own model of a job. What it schedules by (state, priority,
// devices, sequence, times) is plain values; what it only keeps and hands back
// (the spec text, the runner's report) stays as it came. ToProto and
// FromProto are the only places it meets the API's v1::Job, so a field added
// to the API changes no scheduling code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "overlap/v1/overlap.pb.h"
#include "server/runner/run_hooks.h"

namespace overlap::jobs {

enum class JobState { kQueued, kRunning, kSucceeded, kFailed, kCancelled, kAborted };

// The states a job never leaves.
bool IsFinal(JobState state);

struct JobRecord {
  uint64_t sequence = 0;
  std::string id;  // JobIdForSequence(sequence)
  std::string name;
  int priority = 0;
  std::vector<int> devices;
  std::string spec;  // the submitted graph text, as given
  std::string owner;       // v1::Job.owner
  std::string owner_name;
  // A job that spans daemons (v1::Job nodes, coordinator, global_job_id,
  // node_index).
  std::vector<std::string> nodes;
  std::string coordinator;
  std::string global_job_id;
  int node_index = 0;
  bool counted_as_coordinated = false;  // v1::Job.counted_as_coordinated
  JobState state = JobState::kQueued;
  int64_t submit_time_ms = 0;  // unix milliseconds; 0 = not yet
  int64_t start_time_ms = 0;
  int64_t end_time_ms = 0;
  std::string error;  // why it failed, was cancelled or aborted
  absl::StatusCode error_code = absl::StatusCode::kOk;
  std::optional<runner::Progress> progress;  // while it runs
  v1::JobResult result;                      // the runner's report, ops so far
};

v1::JobState ToProto(JobState state);
JobState FromProto(v1::JobState state);
v1::Job ToProto(const JobRecord& job);
JobRecord FromProto(const v1::Job& job);

}  // namespace overlap::jobs
