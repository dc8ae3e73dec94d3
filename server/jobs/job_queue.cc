#include "server/jobs/job_queue.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace overlap::jobs {
namespace {

constexpr char kRestartedError[] = "daemon restarted";
constexpr char kCancelledByRequest[] = "cancelled by request";

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

std::shared_ptr<spdlog::logger> Log() { return GetLogger("sched"); }

// A queued or running job the store could only rebuild from its row's columns
// (JobStore::List): its spec is gone.
bool StoredDataLost(const JobRecord& job) { return job.error_code == absl::StatusCode::kDataLoss; }

}  // namespace

void ApplyRunOutcome(const absl::StatusOr<runner::JobReport>& outcome,
                     const std::string& cancel_reason, JobRecord* job) {
  job->error.clear();
  job->error_code = absl::StatusCode::kOk;
  if (outcome.ok()) {
    job->state = JobState::kSucceeded;
    job->result = *outcome;
    return;
  }
  const absl::Status& status = outcome.status();
  job->error_code = status.code();
  switch (status.code()) {
    case absl::StatusCode::kCancelled:
      job->state = JobState::kCancelled;
      job->error = !cancel_reason.empty() ? cancel_reason : std::string(status.message());
      return;
    case absl::StatusCode::kAborted:
      job->state = JobState::kAborted;
      break;
    default:
      job->state = JobState::kFailed;
      break;
  }
  job->error = std::string(status.message());
}

struct JobQueue::Entry {
  JobRecord job;  // what others see; guarded by JobQueue::mu_
  // Admission's typed graph; null for a job recovered from the store. Set
  // before the entry is shared, read by the executor that runs it.
  GraphPtr graph;
  uint64_t version = 1;
  std::atomic<bool> cancel{false};
  std::string cancel_reason;  // guarded by JobQueue::mu_
  // Guarded by JobQueue::mu_. Taken off pending_ to run; RUNNING is being
  // stored and job still says QUEUED.
  bool starting = false;
  // Guarded by JobQueue::mu_. Its final state is being stored; job shows the
  // state before it until that is done.
  bool ending = false;
  int64_t picked_ms = 0;      // when it was taken off pending_: its start time
  uint64_t job_sequence = 0;  // job.sequence, readable without the mutex
};

JobQueue::JobQueue(JobStore* store, JobRunner runner, JobQueueOptions options)
    : store_(store), runner_(std::move(runner)), options_(options) {}

absl::StatusOr<std::unique_ptr<JobQueue>> JobQueue::Create(JobStore* store, JobRunner runner,
                                                           JobQueueOptions options) {
  if (store == nullptr || !runner) {
    return absl::InvalidArgumentError("queue needs a job store and a runner");
  }
  options.executor_threads = std::max(1, options.executor_threads);
  std::unique_ptr<JobQueue> queue(new JobQueue(store, std::move(runner), options));
  RETURN_IF_ERROR(queue->Recover());
  for (int i = 0; i < options.executor_threads; ++i) {
    queue->executors_.emplace_back([s = queue.get()] { s->ExecutorLoop(); });
  }
  absl::MutexLock lock(&queue->mu_);
  queue->ScheduleLocked();
  return queue;
}

JobQueue::~JobQueue() { Shutdown(); }

absl::Status JobQueue::Recover() {
  // Before any executor or caller exists: the store is read and written here
  // without the mutex, and what it finds is installed under it at the end.
  ASSIGN_OR_RETURN(const uint64_t max_sequence, store_->MaxSequence());

  ASSIGN_OR_RETURN(std::vector<JobRecord> running, store_->ListByState(JobState::kRunning));
  for (JobRecord& job : running) {
    if (StoredDataLost(job)) {
      RETURN_IF_ERROR(FailDamaged(job));
      continue;
    }
    job.state = JobState::kFailed;
    job.error = kRestartedError;
    job.error_code = absl::StatusCode::kUnavailable;
    job.end_time_ms = NowMs();
    RETURN_IF_ERROR(store_->Put(job));
    Log()->warn("job {} was running when overlapd stopped: marked FAILED", job.id);
  }

  ASSIGN_OR_RETURN(std::vector<JobRecord> queued, store_->ListByState(JobState::kQueued));
  std::vector<std::shared_ptr<Entry>> recovered;
  for (JobRecord& job : queued) {
    // Its spec is lost with its stored data: it cannot run again.
    if (StoredDataLost(job)) {
      RETURN_IF_ERROR(FailDamaged(job));
      continue;
    }
    auto entry = std::make_shared<Entry>();
    entry->job = std::move(job);
    entry->job_sequence = entry->job.sequence;
    recovered.push_back(std::move(entry));
  }
  if (!recovered.empty()) Log()->info("recovered {} queued job(s)", recovered.size());
  MaybePrune();
  absl::MutexLock lock(&mu_);
  next_sequence_ = max_sequence + 1;
  for (std::shared_ptr<Entry>& entry : recovered) {
    pending_[{-entry->job.priority, entry->job.sequence}] = entry;
    active_[entry->job.id] = entry;
  }
  return absl::OkStatus();
}

absl::Status JobQueue::FailDamaged(JobRecord& job) {
  Log()->error("job {} ({} when overlapd stopped): {}; marked FAILED", job.id,
               JobStateName(job.state), job.error);
  job.state = JobState::kFailed;
  if (job.end_time_ms == 0) job.end_time_ms = NowMs();
  return store_->Put(job);
}

void JobQueue::RetryUnstored() {
  std::vector<JobRecord> waiting;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, job] : unstored_) waiting.push_back(job);
  }
  for (const JobRecord& job : waiting) {
    if (!store_->Put(job).ok()) continue;
    Log()->info("job {} ({}) stored at last", job.id, JobStateName(job.state));
    absl::MutexLock lock(&mu_);
    unstored_.erase(job.id);
  }
}

absl::Status JobQueue::Store(const JobRecord& job) {
  RetryUnstored();
  absl::Status status = store_->Put(job);
  if (!status.ok()) {
    Log()->error("cannot store job {} ({}): {}", job.id, JobStateName(job.state),
                 status.ToString());
  }
  return status;
}

void JobQueue::MaybePrune() {
  const RetentionPolicy& policy = options_.retention;
  if (policy.keep_jobs <= 0 && policy.keep_ms <= 0) return;
  // Pruning one job at each end would write (and fsync) at each end; with a
  // slack of 1% the deletes come in batches, and the check is a read.
  const int64_t now = NowMs();
  absl::StatusOr<bool> due = store_->PruneDue(policy, now, policy.keep_jobs / 100);
  if (due.ok() && !*due) return;
  absl::StatusOr<int64_t> pruned = store_->Prune(policy, now);
  if (!pruned.ok()) {
    Log()->error("cannot prune finished jobs: {}", pruned.status().ToString());
  } else if (*pruned > 0) {
    Log()->info("pruned {} finished job(s) past the retention limit", *pruned);
  }
}

void JobQueue::ChangedLocked(Entry& entry) {
  ++entry.version;
  changed_.SignalAll();
}

absl::Status JobQueue::RoomLocked(const std::string& owner, const std::string& owner_name) const {
  if (draining_ || stopping_) return absl::UnavailableError("overlapd is draining");
  const int queued = static_cast<int>(pending_.size() + submitting_.size());
  if (queued >= options_.max_queued_jobs) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "queue full: ", queued, " jobs queued (max_queued_jobs = ", options_.max_queued_jobs, ")"));
  }
  if (options_.max_queued_jobs_per_owner > 0) {
    const int mine = QueuedByOwnerLocked(owner);
    if (mine >= options_.max_queued_jobs_per_owner) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "quota: ", owner_name.empty() ? owner : owner_name, " has ", mine,
          " jobs queued (max_queued_jobs_per_user = ", options_.max_queued_jobs_per_owner,
          "); wait for some to start, or cancel some"));
    }
  }
  return absl::OkStatus();
}

absl::Status JobQueue::CheckRoom(const std::string& owner, const std::string& owner_name) const {
  absl::MutexLock lock(&mu_);
  return RoomLocked(owner, owner_name);
}

absl::StatusOr<JobRecord> JobQueue::Submit(const JobRecord& submitted, GraphPtr graph) {
  JobRecord job;
  job.name = submitted.name;
  job.priority = submitted.priority;
  // The class is the graph's wherever a graph comes with the job (a part, a
  // coordinator's job), so that no caller has to copy it.
  job.priority_class = graph ? graph->spec.priority_class : submitted.priority_class;
  job.devices = submitted.devices;
  job.spec = submitted.spec;
  job.owner = submitted.owner;
  job.owner_name = submitted.owner_name;
  job.nodes = submitted.nodes;
  job.coordinator = submitted.coordinator;
  job.global_job_id = submitted.global_job_id;
  job.node_index = submitted.node_index;
  job.counted_as_coordinated = submitted.counted_as_coordinated;
  PendingKey key;
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(RoomLocked(job.owner, job.owner_name));
    job.sequence = next_sequence_++;
    key = {-job.priority, job.sequence};
    submitting_[key] = Submitting{job.devices, job.owner};
    job.submit_time_ms = NowMs();
  }
  job.id = JobIdForSequence(job.sequence);
  // Stored before anyone hears of it: an accepted job survives a crash. A
  // failed write leaves a gap in the ids, never a reused one.
  const absl::Status stored = Store(job);
  absl::MutexLock lock(&mu_);
  submitting_.erase(key);
  changed_.SignalAll();  // StartDrain may wait for this submission
  if (!stored.ok()) {
    ScheduleLocked();  // it held its devices while it was on its way
    return stored;
  }
  auto entry = std::make_shared<Entry>();
  entry->job = std::move(job);
  entry->graph = std::move(graph);
  entry->job_sequence = entry->job.sequence;
  pending_[key] = entry;
  active_[entry->job.id] = entry;
  Log()->info("job {} queued (priority {}, {} device(s))", entry->job.id, entry->job.priority,
              entry->job.devices.size());
  ScheduleLocked();
  return entry->job;
}

int JobQueue::QueuedByOwnerLocked(const std::string& owner) const {
  int count = 0;
  for (const auto& [key, entry] : pending_) count += entry->job.owner == owner ? 1 : 0;
  for (const auto& [key, incoming] : submitting_) count += incoming.owner == owner ? 1 : 0;
  return count;
}

void JobQueue::ScheduleLocked() {
  if (draining_ || stopping_) return;
  // Each device taken so far, and by what: what a job that wants it waits for.
  std::map<int, std::string> claimed;
  std::set<int> session_only;  // held by a session, claimed by nothing else yet
  auto claim = [&claimed, &session_only](const std::vector<int>& devices, const std::string& by) {
    for (int d : devices) {
      claimed.emplace(d, by);
      session_only.erase(d);
    }
  };
  for (const auto& [sequence, entry] : running_) claim(entry->job.devices, "runs " + entry->job.id);
  std::map<int, std::string> session_on;  // held devices, by the session holding them
  for (const auto& [holder, devices] : held_) {
    for (int d : devices) {
      if (claimed.emplace(d, "is held by session " + holder).second) {
        session_on.emplace(d, holder);
        session_only.insert(d);
      }
    }
  }
  auto incoming = submitting_.begin();
  for (auto it = pending_.begin(); it != pending_.end();) {
    // Submissions on their way in that rank above this job claim their devices.
    for (; incoming != submitting_.end() && incoming->first < it->first; ++incoming) {
      claim(incoming->second.devices, "goes first to a job being submitted");
    }
    std::shared_ptr<Entry> entry = it->second;
    const std::vector<int>& devices = entry->job.devices;
    const auto taken =
        std::find_if(devices.begin(), devices.end(), [&](int d) { return claimed.count(d) > 0; });
    if (taken != devices.end() &&
        !BesideSessionsLocked(*entry, claimed, session_only, session_on)) {
      entry->job.waiting = absl::StrCat("device ", *taken, " ", claimed.at(*taken));
      if (session_on.count(*taken) > 0) {
        if (std::optional<std::string> memory = MemoryShortLocked(*entry, session_on)) {
          entry->job.waiting = *std::move(memory);
        }
      }
      claim(devices, absl::StrCat("goes first to ", entry->job.id, ", queued ahead"));
      ++it;
      continue;
    }
    claim(devices, "");
    for (int d : devices) claimed[d] = "runs " + entry->job.id;
    entry->job.waiting.clear();
    it = pending_.erase(it);
    entry->starting = true;
    entry->picked_ms = NowMs();
    running_[entry->job.sequence] = entry;
    ready_.push_back(entry);
    changed_.SignalAll();  // an executor takes it
  }
}

void JobQueue::ExecutorLoop() {
  while (true) {
    std::shared_ptr<Entry> entry;
    {
      absl::MutexLock lock(&mu_);
      while (ready_.empty() && !stopping_) changed_.Wait(&mu_);
      if (ready_.empty()) return;  // stopping, nothing left to run
      entry = std::move(ready_.front());
      ready_.pop_front();
    }
    Execute(entry);
  }
}

void JobQueue::Execute(const std::shared_ptr<Entry>& entry) {
  const JobRecord job = MarkRunning(entry);
  int ops_done = 0;  // on this executor thread only
  absl::StatusOr<runner::JobReport> outcome;
  try {
    outcome = runner_(job, entry->graph, HooksFor(entry, &ops_done));
  } catch (const std::exception& e) {
    // The runner reports errors as Status; an exception (bad_alloc) must not
    // take the daemon down with the job.
    outcome = absl::InternalError(absl::StrCat("job runner threw: ", e.what()));
  }
  End(entry, outcome);
}

JobRecord JobQueue::MarkRunning(const std::shared_ptr<Entry>& entry) {
  JobRecord job;
  {
    absl::MutexLock lock(&mu_);
    job = entry->job;
    job.start_time_ms = entry->picked_ms;
  }
  job.state = JobState::kRunning;
  // A start that cannot be stored still happens: the row stays QUEUED and a
  // restart runs the job again, which is what a queued job does anyway.
  (void)Store(job);
  {
    absl::MutexLock lock(&mu_);
    entry->job.state = JobState::kRunning;
    entry->job.start_time_ms = job.start_time_ms;
    entry->starting = false;
    ChangedLocked(*entry);
  }
  Log()->info("job {} started", job.id);
  return job;
}

runner::RunHooks JobQueue::HooksFor(const std::shared_ptr<Entry>& entry, int* ops_done) {
  runner::RunHooks hooks;
  hooks.on_progress = [this, entry](const runner::Progress& progress) {
    absl::MutexLock lock(&mu_);
    entry->job.progress = progress;
    ChangedLocked(*entry);
  };
  hooks.on_op_done = [this, entry, ops_done](const runner::JobReport& header,
                                             const runner::OpReport& op) {
    const uint64_t sequence = entry->job_sequence;
    // Stored too, one row per op: a daemon that dies mid-job keeps the ops
    // that had finished.
    if (absl::Status s = store_->PutOpResult(sequence, *ops_done, header, op); !s.ok()) {
      Log()->error("cannot store op {} of {}: {}", op.id, JobIdForSequence(sequence), s.ToString());
    }
    ++*ops_done;
    absl::MutexLock lock(&mu_);
    runner::JobReport& result = entry->job.result;
    std::vector<runner::OpReport> ops = std::move(result.ops);
    result = header;
    result.ops = std::move(ops);
    result.ops.push_back(op);
    ChangedLocked(*entry);
  };
  hooks.cancelled = [entry] { return entry->cancel.load(std::memory_order_relaxed); };
  return hooks;
}

void JobQueue::End(const std::shared_ptr<Entry>& entry,
                   const absl::StatusOr<runner::JobReport>& outcome) {
  JobRecord final_job;
  {
    absl::MutexLock lock(&mu_);
    final_job = entry->job;
    entry->ending = true;
  }
  ApplyRunOutcome(outcome, entry->cancel_reason, &final_job);
  final_job.progress.reset();
  final_job.end_time_ms = std::max(NowMs(), final_job.start_time_ms);
  const bool stored = Store(final_job).ok();
  if (final_job.state == JobState::kSucceeded) {
    Log()->info("job {} succeeded in {} ms", final_job.id,
                final_job.end_time_ms - final_job.start_time_ms);
  } else {
    Log()->warn("job {} ended {}: {}", final_job.id, JobStateName(final_job.state),
                final_job.error);
  }
  // Before the end is published, so that whoever sees it sees the history
  // already trimmed to the retention policy.
  MaybePrune();
  absl::MutexLock lock(&mu_);
  running_.erase(final_job.sequence);
  FinishLocked(*entry, std::move(final_job), stored);
}

void JobQueue::FinishLocked(Entry& entry, JobRecord final_job, bool stored) {
  entry.job = std::move(final_job);
  entry.ending = false;
  active_.erase(entry.job.id);
  // Its end is served from memory while the store holds its stale row, and
  // stored with the next write that succeeds.
  if (!stored) unstored_[entry.job.id] = entry.job;
  ChangedLocked(entry);
  ScheduleLocked();
}

std::optional<JobRecord> JobQueue::InMemoryLocked(const std::string& id) {
  if (auto it = active_.find(id); it != active_.end()) return it->second->job;
  if (auto it = unstored_.find(id); it != unstored_.end()) return it->second;
  return std::nullopt;
}

absl::StatusOr<JobRecord> JobQueue::Get(const std::string& id) {
  {
    absl::MutexLock lock(&mu_);
    if (std::optional<JobRecord> job = InMemoryLocked(id)) return *std::move(job);
  }
  // Not in memory: finished, and its end was stored before it left.
  return store_->Get(id);
}

absl::StatusOr<std::vector<JobRecord>> JobQueue::List(std::optional<JobState> state, int limit) {
  ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, store_->List(state, limit));
  absl::MutexLock lock(&mu_);
  for (JobRecord& job : jobs) {
    if (std::optional<JobRecord> live = InMemoryLocked(job.id)) job = *std::move(live);
  }
  return jobs;
}

absl::StatusOr<JobPage> JobQueue::ListSummaries(std::optional<JobState> state, int limit,
                                                uint64_t before) {
  ASSIGN_OR_RETURN(JobPage page, store_->ListSummaries(state, limit, before));
  absl::MutexLock lock(&mu_);
  for (JobRecord& job : page.jobs) {
    if (auto it = unstored_.find(job.id); it != unstored_.end()) {
      job = JobSummary(it->second);
    } else if (auto it = active_.find(job.id);
               it != active_.end() && it->second->job.state == job.state) {
      // Live progress and ops so far; a state the store has and memory does
      // not yet show (a start being published) keeps the stored summary.
      job = JobSummary(it->second->job);
    }
  }
  return page;
}

absl::StatusOr<JobRecord> JobQueue::Cancel(const std::string& id, const std::string& reason) {
  const std::string why = reason.empty() ? kCancelledByRequest : reason;
  std::shared_ptr<Entry> entry;
  JobRecord cancelled;
  {
    absl::MutexLock lock(&mu_);
    auto it = active_.find(id);
    if (it == active_.end()) {
      std::optional<JobRecord> unstored = InMemoryLocked(id);
      if (unstored) {
        return absl::FailedPreconditionError(
            absl::StrCat("job ", id, " already finished (", JobStateName(unstored->state), ")"));
      }
    } else {
      entry = it->second;
      if (entry->job.state != JobState::kQueued || entry->starting || entry->ending) {
        if (!entry->ending && !entry->cancel.exchange(true)) {
          entry->cancel_reason = why;
          Log()->info("job {} cancel requested while running", id);
        }
        return entry->job;
      }
      pending_.erase({-entry->job.priority, entry->job.sequence});
      entry->ending = true;
      cancelled = entry->job;
      // It may have been holding back lower-ranked jobs on its devices.
      ScheduleLocked();
    }
  }
  if (entry == nullptr) {
    ASSIGN_OR_RETURN(const JobRecord stored, store_->Get(id));
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " already finished (", JobStateName(stored.state), ")"));
  }
  cancelled.state = JobState::kCancelled;
  cancelled.error = why;
  cancelled.error_code = absl::StatusCode::kCancelled;
  cancelled.end_time_ms = NowMs();
  const bool stored = Store(cancelled).ok();
  Log()->info("job {} cancelled while queued", id);
  MaybePrune();
  absl::MutexLock lock(&mu_);
  FinishLocked(*entry, cancelled, stored);
  return cancelled;
}

absl::StatusOr<JobSnapshot> JobQueue::WaitForChange(const std::string& id, uint64_t seen_version,
                                                    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  {
    absl::MutexLock lock(&mu_);
    while (true) {
      if (stopping_) return absl::UnavailableError("overlapd is shutting down");
      auto it = active_.find(id);
      if (it == active_.end()) {
        if (auto unstored = unstored_.find(id); unstored != unstored_.end()) {
          return JobSnapshot{unstored->second, kFinalVersion};
        }
        break;  // finished and stored: read below, without the mutex
      }
      if (it->second->version > seen_version || absl::Now() >= deadline) {
        return JobSnapshot{it->second->job, it->second->version};
      }
      changed_.WaitWithDeadline(&mu_, deadline);
    }
  }
  ASSIGN_OR_RETURN(JobRecord stored, store_->Get(id));
  return JobSnapshot{std::move(stored), kFinalVersion};
}

void JobQueue::StartDrain() {
  absl::MutexLock lock(&mu_);
  if (!draining_) Log()->info("draining: {} running, {} queued", running_.size(), pending_.size());
  draining_ = true;
  // Submissions already past their checks end queued, as if they came first.
  mu_.Await(absl::Condition(
      +[](std::map<PendingKey, Submitting>* submitting) { return submitting->empty(); },
      &submitting_));
}

bool JobQueue::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

int JobQueue::CancelRunning(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  int count = 0;
  for (auto& [sequence, entry] : running_) {
    if (!entry->cancel.exchange(true)) entry->cancel_reason = reason;
    ++count;
  }
  return count;
}

bool JobQueue::WaitIdle(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (!running_.empty()) {
    if (changed_.WaitWithDeadline(&mu_, deadline) && absl::Now() >= deadline) break;
  }
  return running_.empty();
}

bool JobQueue::Responsive(absl::Duration within) const {
  // TryLock, not a timed lock: absl's timed waits still take the lock in the
  // end, and a held lock must answer false, not hang the caller.
  const absl::Time deadline = absl::Now() + within;
  while (!mu_.TryLock()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  mu_.Unlock();
  return true;
}

bool JobQueue::BesideSessionsLocked(const Entry& entry, const std::map<int, std::string>& claimed,
                                    const std::set<int>& session_only,
                                    const std::map<int, std::string>& session_on) const {
  // A job spanning daemons (nodes, world) runs on the cluster's engine, not
  // on the node's lanes: it keeps its devices to itself.
  if (!options_.deferred_beside_sessions || !options_.free_bytes || entry.graph == nullptr ||
      entry.job.priority_class != PriorityClass::kDeferred || !entry.job.nodes.empty() ||
      entry.graph->world > 0) {
    return false;
  }
  for (int d : entry.job.devices) {
    if (claimed.count(d) > 0 && session_only.count(d) == 0) return false;
  }
  return !MemoryShortLocked(entry, session_on).has_value();
}

std::optional<std::string> JobQueue::MemoryShortLocked(
    const Entry& entry, const std::map<int, std::string>& session_on) const {
  if (!options_.free_bytes || entry.graph == nullptr) return std::nullopt;
  const int64_t needed = entry.graph->bytes_per_device;
  for (int device : entry.job.devices) {
    const auto held = session_on.find(device);
    if (held == session_on.end()) continue;
    const int64_t free = options_.free_bytes(device);
    if (needed > free) {
      return absl::StrCat("memory: needs ", FormatBytes(needed), ", free ", FormatBytes(free),
                          " on device ", device, " while session ", held->second, " holds it");
    }
  }
  return std::nullopt;
}

int JobQueue::QueuedCount() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(pending_.size());
}

void JobQueue::HoldDevices(const std::string& holder, const std::vector<int>& devices) {
  absl::MutexLock lock(&mu_);
  held_[holder] = devices;
}

void JobQueue::ReleaseDevices(const std::string& holder) {
  absl::MutexLock lock(&mu_);
  if (held_.erase(holder) > 0) ScheduleLocked();
}

std::string JobQueue::RunningOn(const std::vector<int>& devices) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [sequence, entry] : running_) {
    // It shares the lanes with sessions: a session starts beside it.
    if (options_.deferred_beside_sessions &&
        entry->job.priority_class == PriorityClass::kDeferred && entry->job.nodes.empty() &&
        (entry->graph == nullptr || entry->graph->world == 0)) {
      continue;
    }
    for (int device : entry->job.devices) {
      if (std::find(devices.begin(), devices.end(), device) != devices.end()) return entry->job.id;
    }
  }
  return "";
}

int JobQueue::RunningCount() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(running_.size());
}

absl::StatusOr<JobQueueStats> JobQueue::GetStats() {
  JobQueueStats stats;
  ASSIGN_OR_RETURN(stats.jobs_by_state, store_->CountByState());
  ASSIGN_OR_RETURN(const auto usage, store_->UsageByDevice());
  for (const auto& [device, u] : usage) {
    stats.devices[device].busy_ms = u.busy_ms;
    stats.devices[device].jobs_run = u.jobs_run;
  }
  // Running jobs are stored with no end time yet: add their time so far.
  const int64_t now = NowMs();
  absl::MutexLock lock(&mu_);
  for (const auto& [sequence, entry] : running_) {
    if (entry->starting) continue;
    for (int device : entry->job.devices) {
      stats.devices[device].busy_ms +=
          static_cast<double>(std::max<int64_t>(0, now - entry->job.start_time_ms));
    }
  }
  return stats;
}

void JobQueue::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && executors_.empty()) return;
    stopping_ = true;
    changed_.SignalAll();
  }
  for (std::thread& t : executors_) {
    if (t.joinable()) t.join();
  }
  executors_.clear();
}

}  // namespace overlap::jobs
