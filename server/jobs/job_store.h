// The durable job table: every accepted job, its state, result and error, in
// SQLite (WAL, synchronous=FULL) under the daemon's state directory, so that a
// restart keeps the history and runs the jobs that were still queued.
//
// It takes and gives back job records (job_record.h); its rows keep them as
// the API's Job message's bytes (converted by server/wire/, decoded by job_row.h),
// so that a row written by any earlier version reads back. Each row keeps
// the whole job serialized next to the columns queries need
// (id, sequence, state, priority, name, devices, start/end times), and its
// summary (JobSummary) in a table of its own, so that a list reads no spec.
// A running job's results go in one row per finished op (PutOpResult): each
// op writes only itself, and the job's final Put folds them into its row.
// Retention (Prune) deletes old finished rows but keeps what they counted for.
//
// Damage is refused at Open, never served: the file must pass SQLite's
// quick_check, and the highest job id ever given out is kept in a file beside
// the database (kHighestIdFileName), so that a database that lost jobs
// (truncated, replaced, or its WAL damaged) is noticed instead of giving out
// their ids again.
//
// Thread safety: every method may be called from any thread. Writes share one
// connection and reads another (WAL lets them run at once): a read never waits
// for a write's fsync. Errors: common/sqlite_db.h's codes; INVALID_ARGUMENT
// for a state directory that is not one.
#pragma once

#include <atomic>
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
#include "common/sqlite_db.h"
#include "server/jobs/job_record.h"

namespace overlap::jobs {

constexpr char kStoreFileName[] = "overlapd.db";
// Beside it: the highest sequence given out, in decimal.
constexpr char kHighestIdFileName[] = "overlapd.highest-id";

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

// What a list shows of `job`: everything but its spec and, of its result, the
// ops (their count is in ops_finished) and other per-op detail; the totals stay.
JobRecord JobSummary(const JobRecord& job);

// One page of JobStore::ListSummaries.
struct JobPage {
  std::vector<JobRecord> jobs;  // newest first
  uint64_t next_before = 0;     // pass as `before` for the next page; 0 = no more
};

class JobStore {
 public:
  // Creates `state_dir` (and parents) when missing and opens state_dir/overlapd.db.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& state_dir);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Inserts or replaces the job (keyed by id). A job in a final state takes its
  // op rows (PutOpResult) with it: its own result is the whole one.
  absl::Status Put(const JobRecord& job);

  // Stores the result of op `index` of job `sequence` while it runs, with the
  // result's other fields (`header`, which should hold no ops), without
  // rewriting the job: Get and List return the job with every op stored so far.
  absl::Status PutOpResult(uint64_t sequence, int index, const runner::JobReport& header,
                           const runner::OpReport& op);

  // NOT_FOUND when no job has this id; DATA_LOSS naming it when its stored data
  // is damaged.
  absl::StatusOr<JobRecord> Get(const std::string& id);

  // nullopt = every state. limit 0 = all, oldest first; limit > 0
  // = the newest `limit` jobs, newest first. A job whose stored data is damaged
  // is listed as what its row's columns still say (id, state, name, priority,
  // devices, times), with error_code DATA_LOSS and an error saying so.
  absl::StatusOr<std::vector<JobRecord>> List(std::optional<JobState> state, int limit);

  // Jobs in `state`, oldest first.
  absl::StatusOr<std::vector<JobRecord>> ListByState(JobState state);

  // Summaries (JobSummary) of at most `limit` jobs in `state` (nullopt = all)
  // with a sequence below `before` (0 = any), newest first.
  absl::StatusOr<JobPage> ListSummaries(std::optional<JobState> state, int limit, uint64_t before);

  // Whether Prune(policy, now_ms) has more than `slack` jobs to delete (or any
  // past keep_ms): a read that does not wait for writes.
  absl::StatusOr<bool> PruneDue(const RetentionPolicy& policy, int64_t now_ms, int64_t slack);

  // The highest sequence ever stored or given out (0 for an empty store).
  absl::StatusOr<uint64_t> MaxSequence();

  // State -> count, over every stored job.
  absl::StatusOr<std::map<JobState, int64_t>> CountByState();

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
  JobStore(SqliteDb writer, SqliteDb reader, std::string path, std::string highest_id_path,
           uint64_t highest_id);
  absl::Status SetUpSchema() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  absl::Status AddCountedColumn() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Refuses a database that lost jobs the highest-id file says were given out.
  absl::Status CheckNothingLost(bool fresh_file) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  absl::Status CountFinishedRows() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  void NoteHighestId(uint64_t sequence) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  absl::StatusOr<std::vector<JobRecord>> ListLocked(std::optional<JobState> state, int limit)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(read_mu_);
  absl::StatusOr<uint64_t> MaxPrunedSequence(sqlite3* db);
  // Inside Prune's transaction: moves the rows matching `where` into the totals.
  absl::StatusOr<int64_t> PruneLocked(const std::string& where)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  absl::Mutex write_mu_;
  SqliteDb writer_ ABSL_GUARDED_BY(write_mu_);
  // Rows in a final state: what PruneDue compares with keep_jobs without a
  // query (it runs at every job's end).
  std::atomic<int64_t> finished_rows_{0};
  uint64_t highest_id_ ABSL_GUARDED_BY(write_mu_) = 0;  // what the file says
  absl::Mutex read_mu_ ABSL_ACQUIRED_AFTER(write_mu_);
  SqliteDb reader_ ABSL_GUARDED_BY(read_mu_);
  const std::string path_;
  const std::string highest_id_path_;
};

}  // namespace overlap::jobs
