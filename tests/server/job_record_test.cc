// The job queue's own model of a job: the states a job never leaves, and
// their names, which logs, errors and the stats' counts by state use as the
// API names them. (Its mapping to the API's v1::Job is server/wire's, tested
// in tests/wire/report_wire_test.cc.)
#include "server/jobs/job_record.h"

#include "gtest/gtest.h"
#include "server/wire/job_wire.h"

namespace overlap::jobs {
namespace {

TEST(JobRecordTest, FinalStatesAndTheirNamesAreTheApis) {
  for (JobState state : {JobState::kQueued, JobState::kRunning, JobState::kSucceeded,
                         JobState::kFailed, JobState::kCancelled, JobState::kAborted}) {
    EXPECT_EQ(JobStateName(state), v1::JobState_Name(wire::ToProto(state)));
    const bool final_state = state != JobState::kQueued && state != JobState::kRunning;
    EXPECT_EQ(IsFinal(state), final_state) << JobStateName(state);
  }
  const JobRecord job;
  EXPECT_EQ(job.state, JobState::kQueued);
  EXPECT_FALSE(job.progress.has_value());
  EXPECT_TRUE(job.result.ops.empty());
}

}  // namespace
}  // namespace overlap::jobs
