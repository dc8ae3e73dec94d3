#include "server/jobs/job_store.h"

#include <filesystem>

#include "gtest/gtest.h"
#include "server/jobs/scheduler.h"
#include "tests/server/test_util.h"

namespace overlap::jobs {
namespace {

using ::overlap::testing::FakeRunner;
using ::overlap::testing::RunRecord;
using ::overlap::testing::TempDir;

v1::Job MakeJob(uint64_t sequence, v1::JobState state, std::vector<int> devices) {
  v1::Job job;
  job.set_sequence(sequence);
  job.set_id(JobIdForSequence(sequence));
  job.set_state(state);
  job.set_name("job" + std::to_string(sequence));
  job.set_priority(static_cast<int>(sequence % 3));
  for (int d : devices) job.add_devices(d);
  job.set_spec("ops: []\n");
  return job;
}

TEST(JobStoreTest, IdsArePaddedSequenceNumbers) {
  EXPECT_EQ(JobIdForSequence(1), "job-000001");
  EXPECT_EQ(JobIdForSequence(123456), "job-123456");
  EXPECT_EQ(JobIdForSequence(1234567), "job-1234567");
}

TEST(JobStoreTest, RoundTripKeepsTheWholeJob) {
  TempDir dir;
  const std::string state_dir = dir.path() + "/nested/state";
  {
    auto store = JobStore::Open(state_dir);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_TRUE(std::filesystem::exists(state_dir + "/overlapd.db"));
    v1::Job job = MakeJob(7, v1::SUCCEEDED, {0, 1});
    job.set_start_time_ms(1000);
    job.set_end_time_ms(3500);
    job.mutable_result()->set_backend("host");
    job.mutable_result()->add_ops()->set_id("ag");
    job.mutable_result()->set_total_step_ms(1.25);
    ASSERT_TRUE((*store)->Put(job).ok());
    ASSERT_TRUE((*store)->Put(MakeJob(8, v1::QUEUED, {1})).ok());
  }
  auto store = JobStore::Open(state_dir);
  ASSERT_TRUE(store.ok()) << store.status();
  auto job = (*store)->Get("job-000007");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::SUCCEEDED);
  EXPECT_EQ(job->result().ops(0).id(), "ag");
  EXPECT_DOUBLE_EQ(job->result().total_step_ms(), 1.25);
  EXPECT_EQ(job->devices_size(), 2);
  EXPECT_EQ(*(*store)->MaxSequence(), 8u);

  EXPECT_EQ((*store)->Get("job-000009").status().code(), absl::StatusCode::kNotFound);

  auto all = (*store)->List(v1::JOB_STATE_UNSPECIFIED, 0);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].id(), "job-000007");  // oldest first without a limit
  auto newest = (*store)->List(v1::JOB_STATE_UNSPECIFIED, 1);
  ASSERT_EQ(newest->size(), 1u);
  EXPECT_EQ((*newest)[0].id(), "job-000008");
  auto queued = (*store)->List(v1::QUEUED, 0);
  ASSERT_EQ(queued->size(), 1u);
  EXPECT_EQ((*queued)[0].id(), "job-000008");

  auto counts = (*store)->CountByState();
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ((*counts)[v1::SUCCEEDED], 1);
  EXPECT_EQ((*counts)[v1::QUEUED], 1);

  auto usage = (*store)->UsageByDevice();
  ASSERT_TRUE(usage.ok());
  EXPECT_DOUBLE_EQ((*usage)[0].busy_ms, 2500);
  EXPECT_DOUBLE_EQ((*usage)[1].busy_ms, 2500);
  EXPECT_EQ((*usage)[1].jobs_run, 1);  // the queued job never started
}

TEST(JobStoreTest, UnusableStateDirIsInvalidArgument) {
  TempDir dir;
  const std::string file = dir.path() + "/file";
  FILE* f = fopen(file.c_str(), "w");
  fclose(f);
  auto store = JobStore::Open(file + "/sub");
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(store.status().message().find("state_dir"), std::string::npos);
}

// A daemon that stopped with jobs running and queued comes back with the running
// one FAILED "daemon restarted", the queued ones run again in their old order
// under their old ids, and new ids continue the sequence.
TEST(JobStoreTest, RestartRecovery) {
  TempDir dir;
  {
    auto store = JobStore::Open(dir.path());
    ASSERT_TRUE(store.ok());
    v1::Job done = MakeJob(1, v1::SUCCEEDED, {0});
    done.set_start_time_ms(10);
    done.set_end_time_ms(20);
    v1::Job running = MakeJob(2, v1::RUNNING, {0});
    running.set_start_time_ms(30);
    v1::Job queued_a = MakeJob(3, v1::QUEUED, {0});
    queued_a.set_name("sleep:1");
    queued_a.set_priority(0);
    v1::Job queued_b = MakeJob(4, v1::QUEUED, {0});
    queued_b.set_name("sleep:1");
    queued_b.set_priority(0);
    for (const v1::Job& job : {done, running, queued_a, queued_b}) {
      ASSERT_TRUE((*store)->Put(job).ok());
    }
  }
  auto store = JobStore::Open(dir.path());
  ASSERT_TRUE(store.ok());
  FakeRunner runner;
  SchedulerOptions options;
  options.executor_threads = 2;
  auto scheduler = Scheduler::Create(
      store->get(), [&](const v1::Job& j, const ops::RunHooks& h) { return runner.Run(j, h); },
      options);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();

  auto restarted = (*scheduler)->Get("job-000002");
  ASSERT_TRUE(restarted.ok());
  EXPECT_EQ(restarted->state(), v1::FAILED);
  EXPECT_EQ(restarted->error(), "daemon restarted");
  EXPECT_GE(restarted->end_time_ms(), restarted->start_time_ms());

  v1::Job fresh;
  fresh.set_name("sleep:1");
  fresh.add_devices(0);
  auto submitted = (*scheduler)->Submit(fresh);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  EXPECT_EQ(submitted->id(), "job-000005");
  EXPECT_EQ(submitted->sequence(), 5u);

  ASSERT_TRUE((*scheduler)->WaitIdle(absl::Seconds(10)));
  for (const char* id : {"job-000003", "job-000004", "job-000005"}) {
    auto job = (*scheduler)->Get(id);
    ASSERT_TRUE(job.ok());
    EXPECT_EQ(job->state(), v1::SUCCEEDED) << id;
  }
  std::vector<RunRecord> records = runner.records();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].id, "job-000003");
  EXPECT_EQ(records[1].id, "job-000004");
  EXPECT_EQ(records[2].id, "job-000005");
  // The earlier history is still listed.
  auto all = (*scheduler)->List(v1::JOB_STATE_UNSPECIFIED, 0);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 5u);
  EXPECT_EQ((*all)[0].state(), v1::SUCCEEDED);
}

}  // namespace
}  // namespace overlap::jobs
