// The durable job table: every accepted job, its state, result and error, in
// SQLite (WAL, synchronous=FULL) under the daemon's state directory, so that a
// restart keeps the history and runs the jobs that were still queued.
//
// Each row keeps the whole v1::Job serialized next to the columns queries need
// (id, sequence, state, priority, name, devices, start/end times). Retention
// (Prune) deletes old finished rows but keeps what they counted for.
//
// Thread safety: every method may be called from any thread (one connection,
// serialized by an internal mutex). Errors: INVALID_ARGUMENT for an unusable
// state directory, INTERNAL for SQLite failures (with SQLite's message).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "overlap/v1/overlap.pb.h"

struct sqlite3;

namespace overlap::jobs {

constexpr char kStoreFileName[] = "overlapd.db";

// "job-" + the sequence number zero-padded to 6 digits.
std::string JobIdForSequence(uint64_t sequence);

// What busy_ms / jobs_run are computed from: each job that has started.
struct DeviceUsage {
  double busy_ms = 0;
  int64_t jobs_run = 0;
};

// Which finished jobs (SUCCEEDED, FAILED, CANCELLED, ABORTED) the store keeps;
// 0 = no limit. Queued and running jobs are never pruned.
struct RetentionPolicy {
  int64_t keep_jobs = 0;  // the this many finished jobs that ended last
  int64_t keep_ms = 0;    // jobs that ended within this long of now
};

class JobStore {
 public:
  // Creates `state_dir` (and parents) when missing and opens state_dir/overlapd.db.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& state_dir);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Inserts or replaces the job (keyed by id).
  absl::Status Put(const v1::Job& job);

  // NOT_FOUND when no job has this id; DATA_LOSS naming it when its stored data
  // is damaged.
  absl::StatusOr<v1::Job> Get(const std::string& id);

  // JOB_STATE_UNSPECIFIED = every state. limit 0 = all, oldest first; limit > 0
  // = the newest `limit` jobs, newest first. A job whose stored data is damaged
  // is listed as what its row's columns still say (id, state, name, priority,
  // devices, times), with error_code DATA_LOSS and an error saying so.
  absl::StatusOr<std::vector<v1::Job>> List(v1::JobState state, int limit);

  // Jobs in `state`, oldest first.
  absl::StatusOr<std::vector<v1::Job>> ListByState(v1::JobState state);

  // The highest sequence ever stored (0 for an empty store).
  absl::StatusOr<uint64_t> MaxSequence();

  // State -> count, over every stored job.
  absl::StatusOr<std::map<v1::JobState, int64_t>> CountByState();

  // Per device: sum of (end - start) over jobs that started and ended, and the
  // number of jobs that started on it.
  absl::StatusOr<std::map<int, DeviceUsage>> UsageByDevice();

  // Deletes the finished jobs `policy` does not keep and returns how many. What
  // they counted for stays: CountByState and UsageByDevice go on including them,
  // and MaxSequence never goes back, so ids are never reused. Get of a pruned id
  // is NOT_FOUND saying it may have been pruned.
  absl::StatusOr<int64_t> Prune(const RetentionPolicy& policy, int64_t now_ms);

  const std::string& path() const { return path_; }

 private:
  JobStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  absl::Status ExecLocked(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<uint64_t> MaxPrunedSequenceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Inside Prune's transaction: moves the rows matching `where` into the totals.
  absl::StatusOr<int64_t> PruneLocked(const std::string& where) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
  const std::string path_;
};

}  // namespace overlap::jobs
