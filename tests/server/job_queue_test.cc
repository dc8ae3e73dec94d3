#include "server/jobs/job_queue.h"

#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <random>
#include <set>
#include <thread>

#include "gtest/gtest.h"
#include "tests/server/test_util.h"

namespace overlap::jobs {
namespace {

using ::overlap::testing::FakeRunner;
using ::overlap::testing::RunRecord;
using ::overlap::testing::TempDir;

class JobQueueTest : public ::testing::Test {
 protected:
  void Start(int devices = 4, int max_queued = 256,
             std::function<int64_t(int device)> free_bytes = nullptr) {
    auto store = JobStore::Open(dir_.path());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    JobQueueOptions options;
    options.executor_threads = devices;
    options.max_queued_jobs = max_queued;
    options.free_bytes = std::move(free_bytes);
    auto queue = JobQueue::Create(
        store_.get(),
        [this](const jobs::JobRecord& j, const jobs::GraphPtr&, const runner::RunHooks& h) {
          return runner_.Run(j, h);
        },
        options);
    ASSERT_TRUE(queue.ok()) << queue.status();
    queue_ = std::move(*queue);
  }

  JobRecord Submit(const std::string& name, std::vector<int> devices, int priority = 0) {
    JobRecord job;
    job.name = name;
    job.priority = priority;
    job.devices = devices;
    auto submitted = queue_->Submit(job);
    EXPECT_TRUE(submitted.ok()) << submitted.status();
    return submitted.ok() ? *submitted : JobRecord();
  }

  // Waits until the job is in `state` (10 s at most).
  JobRecord AwaitState(const std::string& id, JobState state) {
    uint64_t version = 0;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      auto snapshot = queue_->WaitForChange(id, version, absl::Milliseconds(100));
      EXPECT_TRUE(snapshot.ok()) << snapshot.status();
      if (!snapshot.ok()) break;
      if (snapshot->job.state == state) return snapshot->job;
      version = snapshot->version;
    }
    ADD_FAILURE() << id << " never reached " << JobStateName(state);
    return JobRecord();
  }

  TempDir dir_;
  FakeRunner runner_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<JobQueue> queue_;
};

std::vector<std::string> RunOrder(const std::vector<RunRecord>& records) {
  std::vector<RunRecord> sorted = records;
  std::sort(sorted.begin(), sorted.end(),
            [](const RunRecord& a, const RunRecord& b) { return a.start < b.start; });
  std::vector<std::string> ids;
  for (const RunRecord& r : sorted) ids.push_back(r.id);
  return ids;
}

bool Intersect(const std::vector<int>& a, const std::vector<int>& b) {
  for (int x : a) {
    if (std::find(b.begin(), b.end(), x) != b.end()) return true;
  }
  return false;
}

TEST_F(JobQueueTest, HigherPriorityFirstThenSubmissionOrder) {
  Start();
  JobRecord blocker = Submit("block", {0});
  AwaitState(blocker.id, JobState::kRunning);
  JobRecord a = Submit("sleep:1", {0}, 0);
  JobRecord b = Submit("sleep:1", {0}, 5);
  JobRecord c = Submit("sleep:1", {0}, 0);
  JobRecord d = Submit("sleep:1", {0}, 5);
  JobRecord e = Submit("sleep:1", {0}, -1);
  EXPECT_EQ(a.state, JobState::kQueued);
  EXPECT_EQ(queue_->QueuedCount(), 5);
  ASSERT_TRUE(queue_->Cancel(blocker.id).ok());
  ASSERT_TRUE(queue_->WaitIdle(absl::Seconds(10)));
  EXPECT_EQ(RunOrder(runner_.records()),
            (std::vector<std::string>{blocker.id, b.id, d.id, a.id, c.id, e.id}));
}

// A job on devices a session holds waits; `waiting` says for what: the
// device's free pool where the job's buffers do not fit beside the session,
// the session's hold where they do. The job's class comes from its graph and
// stays with it through the store.
TEST_F(JobQueueTest, AJobOnASessionsDevicesSaysWhetherItsMemoryFits) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  Start(4, 256, [](int device) { return device == 1 ? kMiB : 1024 * kMiB; });
  queue_->HoldDevices("sess-000001", {0, 1});
  auto big_graph = std::make_shared<AdmittedGraph>();
  big_graph->bytes_per_device = 64 * kMiB;
  big_graph->spec.priority_class = PriorityClass::kDeferred;
  auto small_graph = std::make_shared<AdmittedGraph>();
  small_graph->bytes_per_device = kMiB / 2;
  JobRecord job;
  job.name = "sleep:1";
  job.devices = {0, 1};
  absl::StatusOr<JobRecord> big = queue_->Submit(job, big_graph);
  ASSERT_TRUE(big.ok()) << big.status();
  absl::StatusOr<JobRecord> small = queue_->Submit(job, small_graph);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(big->state, JobState::kQueued);
  EXPECT_EQ(big->waiting,
            "memory: needs 64.00 MiB, free 1.00 MiB on device 1 while session sess-000001 holds "
            "it");
  EXPECT_EQ(big->priority_class, PriorityClass::kDeferred);
  EXPECT_EQ(small->waiting, "device 0 is held by session sess-000001");
  EXPECT_EQ(small->priority_class, PriorityClass::kCritical);
  queue_->ReleaseDevices("sess-000001");
  AwaitState(big->id, JobState::kSucceeded);
  AwaitState(small->id, JobState::kSucceeded);
  absl::StatusOr<JobRecord> stored = queue_->Get(big->id);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->priority_class, PriorityClass::kDeferred);
  EXPECT_EQ(stored->waiting, "");
}

TEST_F(JobQueueTest, DisjointDevicesRunConcurrently) {
  Start();
  Submit("sleep:300", {0});
  Submit("sleep:300", {1, 2});
  Submit("sleep:300", {3});
  ASSERT_TRUE(queue_->WaitIdle(absl::Seconds(10)));
  std::vector<RunRecord> records = runner_.records();
  ASSERT_EQ(records.size(), 3u);
  auto latest_start = std::max({records[0].start, records[1].start, records[2].start});
  auto earliest_end = std::min({records[0].end, records[1].end, records[2].end});
  EXPECT_LT(latest_start, earliest_end) << "the three jobs did not overlap in time";
}

// Many jobs with random device sets and priorities, all queued behind a blocker:
// no two jobs sharing a device overlap in time, and of two such jobs the one
// ranked higher (priority desc, sequence asc) runs first.
TEST_F(JobQueueTest, IntersectingJobsNeverOverlapAndKeepRankOrder) {
  Start();
  JobRecord blocker = Submit("block", {0, 1, 2, 3});
  AwaitState(blocker.id, JobState::kRunning);
  std::mt19937 rng(42);
  std::vector<JobRecord> jobs;
  for (int i = 0; i < 24; ++i) {
    std::vector<int> devices;
    for (int d = 0; d < 4; ++d) {
      if (rng() % 3 == 0) devices.push_back(d);
    }
    if (devices.empty()) devices.push_back(static_cast<int>(rng() % 4));
    jobs.push_back(
        Submit("sleep:" + std::to_string(5 + rng() % 20), devices, static_cast<int>(rng() % 3)));
  }
  ASSERT_TRUE(queue_->Cancel(blocker.id).ok());
  ASSERT_TRUE(queue_->WaitIdle(absl::Seconds(20)));

  std::map<std::string, RunRecord> by_id;
  for (const RunRecord& r : runner_.records()) by_id[r.id] = r;
  ASSERT_EQ(by_id.size(), jobs.size() + 1);
  bool any_concurrent = false;
  for (size_t i = 0; i < jobs.size(); ++i) {
    for (size_t j = i + 1; j < jobs.size(); ++j) {
      const RunRecord& a = by_id[jobs[i].id];
      const RunRecord& b = by_id[jobs[j].id];
      const bool overlap = a.start < b.end && b.start < a.end;
      if (!Intersect(a.devices, b.devices)) {
        any_concurrent |= overlap;
        continue;
      }
      EXPECT_FALSE(overlap) << a.id << " and " << b.id << " share a device but overlapped";
      // jobs[i] was submitted first; it goes first unless j has a higher priority.
      const bool i_first = jobs[i].priority >= jobs[j].priority;
      EXPECT_EQ(i_first, a.start < b.start) << a.id << " (priority " << jobs[i].priority << ") vs "
                                            << b.id << " (priority " << jobs[j].priority << ")";
    }
  }
  EXPECT_TRUE(any_concurrent) << "no disjoint jobs ran at the same time";
}

TEST_F(JobQueueTest, CancelQueuedAndRunning) {
  Start(1);
  JobRecord running = Submit("block", {0});
  AwaitState(running.id, JobState::kRunning);
  JobRecord queued = Submit("sleep:1", {0});

  auto cancelled = queue_->Cancel(queued.id);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state, JobState::kCancelled);
  EXPECT_EQ(cancelled->error, "cancelled by request");
  EXPECT_EQ(store_->Get(queued.id)->state, JobState::kCancelled);

  auto stopping = queue_->Cancel(running.id);
  ASSERT_TRUE(stopping.ok()) << stopping.status();
  EXPECT_EQ(stopping->state, JobState::kRunning);  // the runner stops at its next poll
  JobRecord ended = AwaitState(running.id, JobState::kCancelled);
  EXPECT_EQ(ended.error, "cancelled by request");
  EXPECT_EQ(ended.error_code, absl::StatusCode::kCancelled);
  EXPECT_GT(ended.end_time_ms, 0);

  auto again = queue_->Cancel(running.id);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(again.status().message(), "job " + running.id + " already finished (CANCELLED)");
  EXPECT_EQ(queue_->Cancel("job-999999").status().code(), absl::StatusCode::kNotFound);

  // Only the running job ever reached the runner.
  ASSERT_EQ(runner_.records().size(), 1u);
  EXPECT_EQ(runner_.records()[0].id, running.id);
}

TEST_F(JobQueueTest, RunnerOutcomeMapsToState) {
  Start();
  JobRecord ok = Submit("sleep:1", {0});
  JobRecord failed = Submit("fail", {1});
  JobRecord aborted = Submit("abort", {2});
  ASSERT_TRUE(queue_->WaitIdle(absl::Seconds(10)));
  JobRecord j = *queue_->Get(ok.id);
  EXPECT_EQ(j.state, JobState::kSucceeded);
  EXPECT_EQ(j.result.backend, "fake");
  EXPECT_EQ(j.error_code, absl::StatusCode::kOk);
  j = *queue_->Get(failed.id);
  EXPECT_EQ(j.state, JobState::kFailed);
  EXPECT_EQ(j.error, "verification failed: op ag");
  EXPECT_EQ(j.error_code, absl::StatusCode::kFailedPrecondition);
  j = *queue_->Get(aborted.id);
  EXPECT_EQ(j.state, JobState::kAborted);
  EXPECT_EQ(j.error, "communicator aborted: collective timeout");
}

TEST_F(JobQueueTest, QueueCapIsResourceExhausted) {
  Start(1, /*max_queued=*/2);
  JobRecord blocker = Submit("block", {0});
  AwaitState(blocker.id, JobState::kRunning);
  Submit("sleep:1", {0});
  Submit("sleep:1", {0});
  JobRecord extra;
  extra.devices = {0};
  auto refused = queue_->Submit(extra);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("max_queued_jobs"), std::string::npos);
  queue_->CancelRunning("test over");
  ASSERT_TRUE(queue_->WaitIdle(absl::Seconds(10)));
  EXPECT_EQ(queue_->Get(blocker.id)->error, "test over");
}

TEST_F(JobQueueTest, DrainStopsSubmissionsAndKeepsQueuedJobs) {
  Start(1);
  JobRecord running = Submit("iter:5:20", {0});
  AwaitState(running.id, JobState::kRunning);
  JobRecord queued = Submit("sleep:1", {0});
  queue_->StartDrain();
  JobRecord late;
  late.devices = {0};
  auto refused = queue_->Submit(late);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(refused.status().message(), "overlapd is draining");
  ASSERT_TRUE(queue_->WaitIdle(absl::Seconds(10)));
  EXPECT_EQ(queue_->Get(running.id)->state, JobState::kSucceeded);
  queue_->Shutdown();
  EXPECT_EQ(store_->Get(queued.id)->state, JobState::kQueued);
  // Watchers end once the job queue shuts down.
  EXPECT_EQ(queue_->WaitForChange(queued.id, 0, absl::Seconds(5)).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(JobQueueTest, WatchersSeeProgressAndTheFinalState) {
  Start(1);
  JobRecord job = Submit("iter:4:30", {0});
  uint64_t version = 0;
  int max_iteration = 0;
  std::optional<JobState> last;
  for (int i = 0; i < 1000 && !(last && IsFinal(*last)); ++i) {
    auto snapshot = queue_->WaitForChange(job.id, version, absl::Seconds(5));
    ASSERT_TRUE(snapshot.ok()) << snapshot.status();
    ASSERT_GT(snapshot->version, version);
    version = snapshot->version;
    last = snapshot->job.state;
    if (snapshot->job.progress)
      max_iteration = std::max(max_iteration, snapshot->job.progress->iteration);
  }
  EXPECT_EQ(last, JobState::kSucceeded);
  EXPECT_EQ(max_iteration, 4);
  EXPECT_EQ(version, JobQueue::kFinalVersion);
}

TEST_F(JobQueueTest, FinishedOpsShowWhileRunningAndStayAfterAFailure) {
  Start(2);
  JobRecord running = Submit("ops:1:block", {0});
  JobRecord failed = Submit("ops:2:fail", {1});
  // The first op's result is there, in memory and stored, while the job runs on.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  JobRecord seen;
  while (absl::Now() < deadline) {
    seen = *queue_->Get(running.id);
    if (seen.result.ops.size() == 1) break;
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(seen.state, JobState::kRunning);
  ASSERT_EQ(seen.result.ops.size(), 1u);
  EXPECT_EQ(seen.result.ops[0].id, "op0");
  absl::StatusOr<JobRecord> stored = store_->Get(running.id);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->state, JobState::kRunning);
  EXPECT_EQ(stored->result.ops.size(), 1u);

  const JobRecord done = AwaitState(failed.id, JobState::kFailed);
  EXPECT_EQ(done.error, "op op2 failed");
  ASSERT_EQ(done.result.ops.size(), 2u);
  EXPECT_EQ(done.result.ops[1].id, "op1");
  EXPECT_DOUBLE_EQ(done.result.total_step_ms, 3);
  EXPECT_EQ(store_->Get(failed.id)->result.ops.size(), 2u);

  ASSERT_TRUE(queue_->Cancel(running.id).ok());
  const JobRecord cancelled = AwaitState(running.id, JobState::kCancelled);
  EXPECT_EQ(cancelled.result.ops.size(), 1u);
}

TEST_F(JobQueueTest, StatsComeFromStoredTimes) {
  Start();
  Submit("sleep:50", {0, 1});
  Submit("sleep:50", {1});
  ASSERT_TRUE(queue_->WaitIdle(absl::Seconds(10)));
  auto stats = queue_->GetStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->jobs_by_state[JobState::kSucceeded], 2);
  EXPECT_EQ(stats->devices[0].jobs_run, 1);
  EXPECT_EQ(stats->devices[1].jobs_run, 2);
  EXPECT_GE(stats->devices[0].busy_ms, 50);
  EXPECT_GE(stats->devices[1].busy_ms, 100);
  EXPECT_EQ(stats->devices.count(2), 0u);
}

// No store I/O runs under the job queue's mutex: while a submission waits on a
// slow disk (here another connection holds the database's write lock), Get,
// List and WatchJob of other jobs still answer at once.
TEST_F(JobQueueTest, ASlowStoreHoldsUpOnlyTheWriteThatWaitsOnIt) {
  Start();
  const JobRecord done = Submit("sleep:1", {0});
  AwaitState(done.id, JobState::kSucceeded);
  const JobRecord queued = Submit("block", {1});
  AwaitState(queued.id, JobState::kRunning);

  sqlite3* blocker = nullptr;
  ASSERT_EQ(sqlite3_open((dir_.path() + "/" + kStoreFileName).c_str(), &blocker), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(blocker, "BEGIN IMMEDIATE;", nullptr, nullptr, nullptr), SQLITE_OK);
  std::atomic<bool> submitted{false};
  std::thread slow([&] {
    Submit("sleep:1", {2});
    submitted = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_FALSE(submitted.load()) << "the submission should be waiting on the write lock";

  auto got = queue_->Get(done.id);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->state, JobState::kSucceeded);
  auto running = queue_->Get(queued.id);
  ASSERT_TRUE(running.ok()) << running.status();
  EXPECT_EQ(running->state, JobState::kRunning);
  auto listed = queue_->ListSummaries(std::nullopt, 10, 0);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->jobs.size(), 2u) << "the waiting submission is not visible yet";
  auto snapshot = queue_->WaitForChange(queued.id, 0, absl::Seconds(1));
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  // Answered while the submission still waits (it gives up after the store's
  // 5 s busy timeout): had any of them waited behind it, it would be done.
  EXPECT_FALSE(submitted.load());

  ASSERT_EQ(sqlite3_exec(blocker, "ROLLBACK;", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(blocker);
  slow.join();
  EXPECT_TRUE(submitted.load());
  ASSERT_TRUE(queue_->Cancel(queued.id).ok());
  AwaitState(queued.id, JobState::kCancelled);
}

}  // namespace
}  // namespace overlap::jobs
