// The job queue and executor: owns every QUEUED and RUNNING job, decides which
// jobs start, and runs them on its own executor threads (never on gRPC threads).
// It speaks its own model (job_record.h) to its callers, its runner and its
// store; the wire is converted in rpc/, peer/ and the store's row codec.
//
// Scheduling rule. A job runs on its device group. Walk the pending jobs sorted
// by (priority desc, sequence asc) keeping a set of claimed devices, initially
// the devices of running jobs; a job whose devices do not intersect the claimed
// set starts, and either way its devices join the set. So jobs whose device sets
// intersect run one at a time in priority-then-submission order (a passed-over
// job also blocks later, lower-ranked jobs on its devices: no starvation), and
// jobs on disjoint devices run at once.
//
// Every state change and result is written to the JobStore before it becomes
// visible; progress ticks stay in memory and only wake watchers. A finished job
// leaves memory and is read back from the store.
//
// No store I/O runs under the job queue's mutex: a change is prepared under
// it, written outside it, and published under it again, so that a slow disk
// (an fsync, a prune) never holds up Get, List or WatchJob of other jobs.
// Submit reserves its queue slot and sequence under the mutex before its
// write, so queue room and draining are still checked atomically with it:
// StartDrain waits for the submissions in flight, which end queued.
//
// Thread safety: every public method may be called from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/jobs/admitted_graph.h"
#include "server/jobs/job_record.h"
#include "server/jobs/job_store.h"
#include "server/runner/job_runner.h"

namespace overlap::jobs {

// Runs one job (on an executor thread). `job` carries the spec text and the
// resolved devices; `graph` is the typed graph admission made of it, or null
// for a job queued before this process started (the runner parses its text).
// The status maps to the final state: OK -> SUCCEEDED, CANCELLED ->
// CANCELLED, ABORTED -> ABORTED, anything else -> FAILED.
using JobRunner = std::function<absl::StatusOr<runner::JobReport>(
    const JobRecord& job, const GraphPtr& graph, const runner::RunHooks& hooks)>;

struct JobQueueOptions {
  int max_queued_jobs = 256;
  // Queued jobs one owner may have (JobRecord::owner); 0 = no quota.
  int max_queued_jobs_per_owner = 0;
  // Executor threads: at most one job per device runs, so the device count.
  int executor_threads = 1;
  // Finished jobs beyond this are deleted from the store at start and as jobs end.
  RetentionPolicy retention;
  // The bytes of `device`'s pool free now (cheap, no I/O: called under the
  // queue's lock). A job waiting for a device a session holds says whether
  // its buffers (AdmittedGraph::bytes_per_device) would fit there; null: not
  // consulted.
  std::function<int64_t(int device)> free_bytes;
  // A job of priority_class deferred may start on devices a session holds
  // (and nothing else claims) when its buffers fit their free pools
  // (free_bytes, required): its runner shares the session lanes' devices
  // (server/engine/lane_shared_engine.h). A critical job still waits.
  bool deferred_beside_sessions = false;
};

struct JobSnapshot {
  JobRecord job;
  uint64_t version = 0;  // grows with every change; kFinalVersion once out of memory
};

struct DeviceStatsRow {
  double busy_ms = 0;
  int64_t jobs_run = 0;
};

struct JobQueueStats {
  std::map<JobState, int64_t> jobs_by_state;  // every stored job
  std::map<int, DeviceStatsRow> devices;      // jobs that started; running ones so far
};

// Fills the job's final state, error, error_code and result from the runner's
// outcome. `cancel_reason` (may be empty) replaces the error text of a CANCELLED run.
void ApplyRunOutcome(const absl::StatusOr<runner::JobReport>& outcome,
                     const std::string& cancel_reason, JobRecord* job);

class JobQueue {
 public:
  static constexpr uint64_t kFinalVersion = ~uint64_t{0};

  // Recovers from the store (a RUNNING job ends FAILED "daemon restarted"; QUEUED
  // jobs are pending again, same ids and order), then starts the executors.
  // `store` must outlive the job queue.
  static absl::StatusOr<std::unique_ptr<JobQueue>> Create(JobStore* store, JobRunner runner,
                                                          JobQueueOptions options);
  ~JobQueue();  // Shutdown()
  JobQueue(const JobQueue&) = delete;
  JobQueue& operator=(const JobQueue&) = delete;

  // Of `job` the job queue takes name, priority, devices, spec and owner; it
  // assigns id, sequence, state and submit time, stores it, and returns the
  // stored job. `graph` (admission's typed graph of the spec) goes to the
  // runner with the job. UNAVAILABLE while draining, RESOURCE_EXHAUSTED when
  // max_queued_jobs are queued, or the owner's max_queued_jobs_per_owner.
  absl::StatusOr<JobRecord> Submit(const JobRecord& job, GraphPtr graph = nullptr);

  // NOT_FOUND for an unknown id.
  absl::StatusOr<JobRecord> Get(const std::string& id);
  // See JobStore::List; active jobs carry their live progress.
  absl::StatusOr<std::vector<JobRecord>> List(std::optional<JobState> state, int limit);
  // See JobStore::ListSummaries; active jobs carry their live progress.
  absl::StatusOr<JobPage> ListSummaries(std::optional<JobState> state, int limit, uint64_t before);

  // QUEUED -> CANCELLED at once; RUNNING -> the runner is asked to stop and the
  // job (still RUNNING) is returned; a final job -> FAILED_PRECONDITION; unknown
  // -> NOT_FOUND. The job's error says `reason` ("" = "cancelled by request").
  absl::StatusOr<JobRecord> Cancel(const std::string& id, const std::string& reason = "");

  // Returns the job as soon as its version is above `seen_version`, or after
  // `timeout` unchanged. NOT_FOUND for an unknown id; UNAVAILABLE once Shutdown
  // began.
  absl::StatusOr<JobSnapshot> WaitForChange(const std::string& id, uint64_t seen_version,
                                            absl::Duration timeout);

  // What Submit would refuse a job of `owner` for now (draining, the queue full,
  // the owner's quota), without queueing anything: `overlapctl validate`.
  absl::Status CheckRoom(const std::string& owner, const std::string& owner_name) const;

  // Submit answers UNAVAILABLE and no further job starts; queued jobs stay QUEUED.
  void StartDrain();
  bool draining() const;
  // Asks every running job to stop; they end CANCELLED with `reason`. Returns how many.
  int CancelRunning(const std::string& reason);
  // True once no job is running (within `timeout`).
  bool WaitIdle(absl::Duration timeout);
  int QueuedCount() const;
  int RunningCount() const;
  // Whether the job queue's lock could be taken within `within`: the
  // heartbeat systemd's watchdog is fed from. A long job never holds the lock,
  // so a slow autotune does not stop it; a deadlock does.
  bool Responsive(absl::Duration within) const;

  absl::StatusOr<JobQueueStats> GetStats();

  // Devices a session holds (server/sessions/): no job starts on them until
  // ReleaseDevices, as if a job ran there. Holding again replaces `holder`'s set.
  // A job waiting for one says so in JobRecord::waiting: "memory: needs X,
  // free Y on device D while session S holds it" where its buffers do not
  // fit the device's free pool (JobQueueOptions::free_bytes), "device D is
  // held by session S" otherwise.
  void HoldDevices(const std::string& holder, const std::vector<int>& devices);
  void ReleaseDevices(const std::string& holder);
  // The id of a job running on one of `devices`, or "" when none is (a job
  // that shares the lanes with sessions, deferred_beside_sessions, is not named).
  std::string RunningOn(const std::vector<int>& devices) const;

  // Ends watchers (UNAVAILABLE) and joins the executors. Running jobs are waited
  // for: call WaitIdle (and CancelRunning) first. Idempotent.
  void Shutdown();

 private:
  struct Entry;
  using PendingKey = std::pair<int, uint64_t>;  // (-priority, sequence)

  JobQueue(JobStore* store, JobRunner runner, JobQueueOptions options);
  absl::Status Recover() ABSL_LOCKS_EXCLUDED(mu_);
  // A queued or running job whose stored data was damaged (the store rebuilt it
  // from its row, error_code DATA_LOSS) ends FAILED with that error.
  absl::Status FailDamaged(JobRecord& job) ABSL_LOCKS_EXCLUDED(mu_);
  // A job in active_ or unstored_ (copied), or nullopt: then the store has it.
  std::optional<JobRecord> InMemoryLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the pending jobs that may start to ready_ (they are stored RUNNING
  // by the executor that takes them, before anyone sees them so).
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why `entry` cannot share a device a session holds (`session_on`: the
  // holder of each held device): the first such device whose free pool is
  // short of the job's buffers; nullopt when they fit, or when the queue
  // cannot tell (no free_bytes, a job recovered without its graph).
  std::optional<std::string> MemoryShortLocked(const Entry& entry,
                                               const std::map<int, std::string>& session_on) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `entry` may start beside the sessions holding its devices: a
  // deferred-class job, every device it cannot have held by a session only
  // (`session_only`), and its buffers known to fit beside them.
  bool BesideSessionsLocked(const Entry& entry, const std::map<int, std::string>& claimed,
                            const std::set<int>& session_only,
                            const std::map<int, std::string>& session_on) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stores `job` (first the ends kept in unstored_); never under mu_.
  absl::Status Store(const JobRecord& job) ABSL_LOCKS_EXCLUDED(mu_);
  void RetryUnstored() ABSL_LOCKS_EXCLUDED(mu_);
  // Publishes a finished job: out of active_ (kept in unstored_ when its end
  // could not be stored), watchers woken, the next jobs scheduled.
  void FinishLocked(Entry& entry, JobRecord final_job, bool stored)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies the retention policy when it has enough to delete; a failure is
  // logged, never fatal. Never under mu_.
  void MaybePrune() ABSL_LOCKS_EXCLUDED(mu_);
  void ChangedLocked(Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExecutorLoop();
  // One job on an executor: stored RUNNING, run with hooks that publish its
  // progress and store each op's result, ended with its outcome.
  void Execute(const std::shared_ptr<Entry>& entry) ABSL_LOCKS_EXCLUDED(mu_);
  JobRecord MarkRunning(const std::shared_ptr<Entry>& entry) ABSL_LOCKS_EXCLUDED(mu_);
  runner::RunHooks HooksFor(const std::shared_ptr<Entry>& entry, int* ops_done);
  void End(const std::shared_ptr<Entry>& entry, const absl::StatusOr<runner::JobReport>& outcome)
      ABSL_LOCKS_EXCLUDED(mu_);

  JobStore* const store_;
  const JobRunner runner_;
  const JobQueueOptions options_;

  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // any job changed, a job was made ready, or shutdown
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  // Submissions reserved and being stored, by rank, with their devices: the
  // queue holds their devices for them as for pending jobs, so that no
  // lower-ranked job starts there while one is on its way in.
  struct Submitting {
    std::vector<int> devices;
    std::string owner;
  };
  std::map<PendingKey, Submitting> submitting_ ABSL_GUARDED_BY(mu_);
  // Queued jobs (pending or submitting) per owner, for the quota.
  int QueuedByOwnerLocked(const std::string& owner) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RoomLocked(const std::string& owner, const std::string& owner_name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::shared_ptr<Entry>> active_ ABSL_GUARDED_BY(mu_);
  std::map<PendingKey, std::shared_ptr<Entry>> pending_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::shared_ptr<Entry>> running_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<int>> held_ ABSL_GUARDED_BY(mu_);  // by holder
  // Finished jobs whose end the store could not take (a full disk): served from
  // here, over their stale rows, and stored again with every later store.
  std::map<std::string, JobRecord> unstored_ ABSL_GUARDED_BY(mu_);
  std::deque<std::shared_ptr<Entry>> ready_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> executors_;
};

}  // namespace overlap::jobs
