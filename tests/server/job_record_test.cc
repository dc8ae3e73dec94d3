// The job queue's job model meets the API's v1::Job only in ToProto/FromProto.
#include "server/jobs/job_record.h"

#include "gtest/gtest.h"

namespace overlap::jobs {
namespace {

TEST(JobRecordTest, RoundTripsEveryFieldTheSchedulerKeeps) {
  JobRecord job;
  job.sequence = 42;
  job.id = "job-000042";
  job.name = "layer";
  job.priority = -3;
  job.devices = {2, 3};
  job.spec = "ops: []\n";
  job.state = JobState::kAborted;
  job.submit_time_ms = 10;
  job.start_time_ms = 20;
  job.end_time_ms = 30;
  job.error = "communicator aborted";
  job.error_code = absl::StatusCode::kAborted;
  job.progress = runner::Progress{1, 4, "fc2", "timed 2/4", 3, 5};
  job.result.add_ops()->set_id("fc1");
  job.result.set_total_step_ms(1.5);

  const v1::Job wire = ToProto(job);
  EXPECT_EQ(wire.state(), v1::ABORTED);
  EXPECT_EQ(wire.error_code(), static_cast<int32_t>(absl::StatusCode::kAborted));
  EXPECT_EQ(wire.ops_finished(), 1);
  EXPECT_EQ(wire.progress().phase(), "timed 2/4");
  const JobRecord back = FromProto(wire);
  EXPECT_EQ(back.sequence, 42u);
  EXPECT_EQ(back.id, job.id);
  EXPECT_EQ(back.name, job.name);
  EXPECT_EQ(back.priority, -3);
  EXPECT_EQ(back.devices, job.devices);
  EXPECT_EQ(back.spec, job.spec);
  EXPECT_EQ(back.state, JobState::kAborted);
  EXPECT_EQ(back.end_time_ms, 30);
  EXPECT_EQ(back.error_code, absl::StatusCode::kAborted);
  ASSERT_TRUE(back.progress.has_value());
  EXPECT_EQ(back.progress->op_id, "fc2");
  EXPECT_EQ(back.progress->iterations, 5);
  EXPECT_EQ(back.result.ops(0).id(), "fc1");
  EXPECT_TRUE(IsFinal(back.state));
  EXPECT_FALSE(IsFinal(JobState::kRunning));
  EXPECT_FALSE(FromProto(v1::Job()).progress.has_value());
}

}  // namespace
}  // namespace overlap::jobs
