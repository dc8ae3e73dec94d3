// The job queue's own model of a job: what it schedules by (state, priority,
// devices, sequence, times) and what it keeps and hands back (the spec text,
// the runner's report), all plain values. The wire meets it only in
// server/wire/job_wire.h, used by the API, the peer port and the store's rows,
// so a field added to the API changes no scheduling code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/graph.h"
#include "server/runner/job_report.h"
#include "server/runner/run_hooks.h"

namespace overlap::jobs {

enum class JobState { kQueued, kRunning, kSucceeded, kFailed, kCancelled, kAborted };

// The states a job never leaves.
bool IsFinal(JobState state);
// "QUEUED", "RUNNING", ... as the API names them, for logs and errors.
const char* JobStateName(JobState state);

struct JobRecord;

// The id that names a job spanning daemons on every node of it:
// "<coordinator's node name>/<its job id there>" ("10.0.0.1:7070/job-000001").
// `node_name` is this daemon's (the coordinator's own job knows no other). ""
// for a job of this node alone, whose short id ("job-000001") names it here only.
std::string GlobalIdOf(const JobRecord& job, const std::string& node_name);
// Splits a global id at its last '/' (job ids hold none): false for a short id.
bool SplitGlobalId(const std::string& id, std::string* node, std::string* job_id);

struct JobRecord {
  uint64_t sequence = 0;
  std::string id;  // JobIdForSequence(sequence)
  std::string name;
  int priority = 0;
  // Graph key priority_class: which lane its collectives belong on beside sessions.
  PriorityClass priority_class = PriorityClass::kCritical;
  std::vector<int> devices;
  std::string spec;   // the submitted graph text, as given
  std::string owner;  // who submitted it: "uid:1000", "x509:<subject>", "anonymous"
  std::string owner_name;
  // Whether its owner was an admin where it was submitted: a job spanning
  // daemons says so to its peers. Never stored by the queue.
  bool owner_admin = false;
  // A job that spans daemons: every node's peer address in rank order; on a
  // part, its coordinator's address, the job's id there and this node's place.
  std::vector<std::string> nodes;
  std::string coordinator;
  std::string global_job_id;
  int node_index = 0;
  // A job that spans daemons: its id on every node of it (GlobalIdOf). A part
  // keeps it from its admission; a coordinator's job is given it when shown.
  std::string global_id;
  // A part of a job this node coordinates: the coordinator's job counts for it.
  bool counted_as_coordinated = false;
  JobState state = JobState::kQueued;
  int64_t submit_time_ms = 0;  // unix milliseconds; 0 = not yet
  int64_t start_time_ms = 0;
  int64_t end_time_ms = 0;
  std::string error;  // why it failed, was cancelled or aborted
  // A queued job: why it has not started (the queue's latest decision); "" otherwise.
  std::string waiting;
  absl::StatusCode error_code = absl::StatusCode::kOk;
  std::optional<runner::Progress> progress;  // while it runs
  runner::JobReport result;                  // the runner's report, ops so far
  // Ops with a result: result.ops.size(), or more where a summary (a list's)
  // left the ops out.
  int ops_finished = 0;
};

}  // namespace overlap::jobs
