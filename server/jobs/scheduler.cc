#include "server/jobs/scheduler.h"

#include <algorithm>
#include <atomic>
#include <exception>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace overlap::jobs {
namespace {

constexpr char kRestartedError[] = "daemon restarted";
constexpr char kCancelledByRequest[] = "cancelled by request";

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

std::shared_ptr<spdlog::logger> Log() { return GetLogger("sched"); }

// A queued or running job the store could only rebuild from its row's columns
// (JobStore::List): its spec is gone.
bool StoredDataLost(const v1::Job& job) {
  return job.error_code() == static_cast<int32_t>(absl::StatusCode::kDataLoss);
}

}  // namespace

bool IsFinalState(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED ||
         state == v1::ABORTED;
}

void ApplyRunOutcome(const absl::StatusOr<v1::JobResult>& outcome, const std::string& cancel_reason,
                     v1::Job* job) {
  job->clear_error();
  job->set_error_code(0);
  if (outcome.ok()) {
    job->set_state(v1::SUCCEEDED);
    *job->mutable_result() = *outcome;
    return;
  }
  const absl::Status& status = outcome.status();
  job->set_error_code(static_cast<int32_t>(status.code()));
  switch (status.code()) {
    case absl::StatusCode::kCancelled:
      job->set_state(v1::CANCELLED);
      job->set_error(!cancel_reason.empty() ? cancel_reason : std::string(status.message()));
      return;
    case absl::StatusCode::kAborted:
      job->set_state(v1::ABORTED);
      break;
    default:
      job->set_state(v1::FAILED);
      break;
  }
  job->set_error(std::string(status.message()));
}

struct Scheduler::Entry {
  v1::Job job;  // guarded by Scheduler::mu_
  uint64_t version = 1;
  std::atomic<bool> cancel{false};
  std::string cancel_reason;  // guarded by Scheduler::mu_
};

Scheduler::Scheduler(JobStore* store, JobRunner runner, SchedulerOptions options)
    : store_(store), runner_(std::move(runner)), options_(options) {}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(JobStore* store, JobRunner runner,
                                                             SchedulerOptions options) {
  if (store == nullptr || !runner) {
    return absl::InvalidArgumentError("scheduler needs a job store and a runner");
  }
  options.executor_threads = std::max(1, options.executor_threads);
  std::unique_ptr<Scheduler> scheduler(new Scheduler(store, std::move(runner), options));
  if (absl::Status s = scheduler->Recover(); !s.ok()) return s;
  for (int i = 0; i < options.executor_threads; ++i) {
    scheduler->executors_.emplace_back([s = scheduler.get()] { s->ExecutorLoop(); });
  }
  absl::MutexLock lock(&scheduler->mu_);
  scheduler->ScheduleLocked();
  return scheduler;
}

Scheduler::~Scheduler() { Shutdown(); }

absl::Status Scheduler::Recover() {
  absl::MutexLock lock(&mu_);
  auto max_sequence = store_->MaxSequence();
  if (!max_sequence.ok()) return max_sequence.status();
  next_sequence_ = *max_sequence + 1;

  auto running = store_->ListByState(v1::RUNNING);
  if (!running.ok()) return running.status();
  for (v1::Job& job : *running) {
    if (StoredDataLost(job)) {
      if (absl::Status s = FailDamagedLocked(job); !s.ok()) return s;
      continue;
    }
    job.set_state(v1::FAILED);
    job.set_error(kRestartedError);
    job.set_error_code(static_cast<int32_t>(absl::StatusCode::kUnavailable));
    job.set_end_time_ms(NowMs());
    if (absl::Status s = store_->Put(job); !s.ok()) return s;
    Log()->warn("job {} was running when overlapd stopped: marked FAILED", job.id());
  }

  auto queued = store_->ListByState(v1::QUEUED);
  if (!queued.ok()) return queued.status();
  int recovered = 0;
  for (v1::Job& job : *queued) {
    // Its spec is lost with its stored data: it cannot run again.
    if (StoredDataLost(job)) {
      if (absl::Status s = FailDamagedLocked(job); !s.ok()) return s;
      continue;
    }
    ++recovered;
    auto entry = std::make_shared<Entry>();
    entry->job = std::move(job);
    pending_[{-entry->job.priority(), entry->job.sequence()}] = entry;
    active_[entry->job.id()] = entry;
  }
  if (recovered > 0) Log()->info("recovered {} queued job(s)", recovered);
  PruneLocked();
  return absl::OkStatus();
}

absl::Status Scheduler::FailDamagedLocked(v1::Job& job) {
  Log()->error("job {} ({} when overlapd stopped): {}; marked FAILED", job.id(),
               v1::JobState_Name(job.state()), job.error());
  job.set_state(v1::FAILED);
  if (job.end_time_ms() == 0) job.set_end_time_ms(NowMs());
  return store_->Put(job);
}

void Scheduler::StoreLocked(const v1::Job& job) {
  for (auto it = unstored_.begin(); it != unstored_.end();) {
    if (store_->Put(it->second).ok()) {
      Log()->info("job {} ({}) stored at last", it->first, v1::JobState_Name(it->second.state()));
      it = unstored_.erase(it);
    } else {
      ++it;
    }
  }
  // A state change that cannot be stored still happens in memory: the job is
  // running or done either way, and failing it would lose the real outcome.
  if (absl::Status s = store_->Put(job); !s.ok()) {
    Log()->error("cannot store job {} ({}): {}", job.id(), v1::JobState_Name(job.state()),
                 s.ToString());
    // A finished job leaves active_: keep its end here, or its stale row
    // (RUNNING) would be all that is left of it.
    if (job.state() != v1::QUEUED && job.state() != v1::RUNNING) unstored_[job.id()] = job;
  } else {
    unstored_.erase(job.id());
  }
}

void Scheduler::PruneLocked() {
  absl::StatusOr<int64_t> pruned = store_->Prune(options_.retention, NowMs());
  if (!pruned.ok()) {
    Log()->error("cannot prune finished jobs: {}", pruned.status().ToString());
  } else if (*pruned > 0) {
    Log()->info("pruned {} finished job(s) past the retention limit", *pruned);
  }
}

void Scheduler::ChangedLocked(Entry& entry) {
  ++entry.version;
  changed_.SignalAll();
}

absl::StatusOr<v1::Job> Scheduler::Submit(v1::Job job) {
  absl::MutexLock lock(&mu_);
  if (draining_ || stopping_) return absl::UnavailableError("overlapd is draining");
  if (static_cast<int>(pending_.size()) >= options_.max_queued_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat("queue full: ", pending_.size(),
                     " jobs queued (max_queued_jobs = ", options_.max_queued_jobs, ")"));
  }
  const uint64_t sequence = next_sequence_;
  job.set_sequence(sequence);
  job.set_id(JobIdForSequence(sequence));
  job.set_state(v1::QUEUED);
  job.set_submit_time_ms(NowMs());
  job.set_start_time_ms(0);
  job.set_end_time_ms(0);
  job.clear_error();
  job.set_error_code(0);
  job.clear_result();
  job.clear_progress();
  // Stored before anyone hears of it: an accepted job survives a crash.
  if (absl::Status s = store_->Put(job); !s.ok()) return s;
  ++next_sequence_;
  auto entry = std::make_shared<Entry>();
  entry->job = job;
  pending_[{-job.priority(), sequence}] = entry;
  active_[job.id()] = entry;
  Log()->info("job {} queued (priority {}, {} device(s))", job.id(), job.priority(),
              job.devices_size());
  ScheduleLocked();
  changed_.SignalAll();
  return entry->job;
}

void Scheduler::ScheduleLocked() {
  if (draining_ || stopping_) return;
  std::set<int> claimed;
  for (const auto& [sequence, entry] : running_) {
    claimed.insert(entry->job.devices().begin(), entry->job.devices().end());
  }
  for (auto it = pending_.begin(); it != pending_.end();) {
    std::shared_ptr<Entry> entry = it->second;
    const auto& devices = entry->job.devices();
    const bool blocked =
        std::any_of(devices.begin(), devices.end(), [&](int d) { return claimed.count(d) > 0; });
    claimed.insert(devices.begin(), devices.end());
    if (blocked) {
      ++it;
      continue;
    }
    it = pending_.erase(it);
    entry->job.set_state(v1::RUNNING);
    entry->job.set_start_time_ms(NowMs());
    StoreLocked(entry->job);
    running_[entry->job.sequence()] = entry;
    ready_.push_back(entry);
    ChangedLocked(*entry);
    Log()->info("job {} started", entry->job.id());
  }
}

void Scheduler::ExecutorLoop() {
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

void Scheduler::Execute(const std::shared_ptr<Entry>& entry) {
  v1::Job job;
  {
    absl::MutexLock lock(&mu_);
    job = entry->job;
  }
  ops::RunHooks hooks;
  hooks.on_progress = [this, entry](const v1::Progress& progress) {
    absl::MutexLock lock(&mu_);
    *entry->job.mutable_progress() = progress;
    ChangedLocked(*entry);
  };
  hooks.on_op_done = [this, entry](const v1::JobResult& so_far) {
    absl::MutexLock lock(&mu_);
    *entry->job.mutable_result() = so_far;
    // Stored too: a daemon that dies mid-job keeps the ops that had finished.
    StoreLocked(entry->job);
    ChangedLocked(*entry);
  };
  hooks.cancelled = [entry] { return entry->cancel.load(std::memory_order_relaxed); };

  absl::StatusOr<v1::JobResult> outcome;
  try {
    outcome = runner_(job, hooks);
  } catch (const std::exception& e) {
    // The runner reports errors as Status; an exception (bad_alloc) must not
    // take the daemon down with the job.
    outcome = absl::InternalError(absl::StrCat("job runner threw: ", e.what()));
  }

  absl::MutexLock lock(&mu_);
  ApplyRunOutcome(outcome, entry->cancel_reason, &entry->job);
  entry->job.set_end_time_ms(std::max(NowMs(), entry->job.start_time_ms()));
  StoreLocked(entry->job);
  if (entry->job.state() == v1::SUCCEEDED) {
    Log()->info("job {} succeeded in {} ms", entry->job.id(),
                entry->job.end_time_ms() - entry->job.start_time_ms());
  } else {
    Log()->warn("job {} ended {}: {}", entry->job.id(), v1::JobState_Name(entry->job.state()),
                entry->job.error());
  }
  running_.erase(entry->job.sequence());
  active_.erase(entry->job.id());
  PruneLocked();
  ChangedLocked(*entry);
  ScheduleLocked();
}

absl::StatusOr<v1::Job> Scheduler::Get(const std::string& id) {
  absl::MutexLock lock(&mu_);
  if (auto it = active_.find(id); it != active_.end()) return it->second->job;
  return FinishedLocked(id);
}

absl::StatusOr<v1::Job> Scheduler::FinishedLocked(const std::string& id) {
  if (auto it = unstored_.find(id); it != unstored_.end()) return it->second;
  return store_->Get(id);
}

absl::StatusOr<std::vector<v1::Job>> Scheduler::List(v1::JobState state, int limit) {
  absl::MutexLock lock(&mu_);
  auto jobs = store_->List(state, limit);
  if (!jobs.ok()) return jobs.status();
  for (v1::Job& job : *jobs) {
    if (auto it = active_.find(job.id()); it != active_.end()) job = it->second->job;
    if (auto it = unstored_.find(job.id()); it != unstored_.end()) job = it->second;
  }
  return jobs;
}

absl::StatusOr<v1::Job> Scheduler::Cancel(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = active_.find(id);
  if (it == active_.end()) {
    absl::StatusOr<v1::Job> stored = FinishedLocked(id);
    if (!stored.ok()) return stored.status();
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " already finished (", v1::JobState_Name(stored->state()), ")"));
  }
  std::shared_ptr<Entry> entry = it->second;
  if (entry->job.state() == v1::QUEUED) {
    pending_.erase({-entry->job.priority(), entry->job.sequence()});
    active_.erase(it);
    entry->job.set_state(v1::CANCELLED);
    entry->job.set_error(kCancelledByRequest);
    entry->job.set_error_code(static_cast<int32_t>(absl::StatusCode::kCancelled));
    entry->job.set_end_time_ms(NowMs());
    StoreLocked(entry->job);
    ChangedLocked(*entry);
    Log()->info("job {} cancelled while queued", id);
    PruneLocked();
    // It may have been holding back lower-ranked jobs on its devices.
    ScheduleLocked();
    return entry->job;
  }
  if (!entry->cancel.exchange(true)) {
    entry->cancel_reason = kCancelledByRequest;
    Log()->info("job {} cancel requested while running", id);
  }
  return entry->job;
}

absl::StatusOr<JobSnapshot> Scheduler::WaitForChange(const std::string& id, uint64_t seen_version,
                                                     absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (true) {
    if (stopping_) return absl::UnavailableError("overlapd is shutting down");
    auto it = active_.find(id);
    if (it == active_.end()) {
      auto stored = store_->Get(id);
      if (!stored.ok()) return stored.status();
      return JobSnapshot{std::move(*stored), kFinalVersion};
    }
    if (it->second->version > seen_version || absl::Now() >= deadline) {
      return JobSnapshot{it->second->job, it->second->version};
    }
    changed_.WaitWithDeadline(&mu_, deadline);
  }
}

void Scheduler::StartDrain() {
  absl::MutexLock lock(&mu_);
  if (!draining_) Log()->info("draining: {} running, {} queued", running_.size(), pending_.size());
  draining_ = true;
}

bool Scheduler::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

int Scheduler::CancelRunning(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  int count = 0;
  for (auto& [sequence, entry] : running_) {
    if (!entry->cancel.exchange(true)) entry->cancel_reason = reason;
    ++count;
  }
  return count;
}

bool Scheduler::WaitIdle(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (!running_.empty()) {
    if (changed_.WaitWithDeadline(&mu_, deadline) && absl::Now() >= deadline) break;
  }
  return running_.empty();
}

int Scheduler::QueuedCount() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(pending_.size());
}

int Scheduler::RunningCount() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(running_.size());
}

absl::StatusOr<SchedulerStats> Scheduler::GetStats() {
  absl::MutexLock lock(&mu_);
  SchedulerStats stats;
  auto counts = store_->CountByState();
  if (!counts.ok()) return counts.status();
  stats.jobs_by_state = std::move(*counts);
  auto usage = store_->UsageByDevice();
  if (!usage.ok()) return usage.status();
  for (const auto& [device, u] : *usage) {
    stats.devices[device].busy_ms = u.busy_ms;
    stats.devices[device].jobs_run = u.jobs_run;
  }
  // Running jobs are stored with no end time yet: add their time so far.
  const int64_t now = NowMs();
  for (const auto& [sequence, entry] : running_) {
    for (int device : entry->job.devices()) {
      stats.devices[device].busy_ms +=
          static_cast<double>(std::max<int64_t>(0, now - entry->job.start_time_ms()));
    }
  }
  return stats;
}

void Scheduler::Shutdown() {
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
