// A list's REASON cell: one word for why a job waits or ended.
#include "client/format/job_reason.h"

#include "gtest/gtest.h"

namespace overlap::client {
namespace {

v1::Job Queued(const std::string& waiting) {
  v1::Job job;
  job.set_state(v1::QUEUED);
  job.set_waiting(waiting);
  return job;
}

v1::Job Ended(v1::JobState state, const std::string& error, int code = 0) {
  v1::Job job;
  job.set_state(state);
  job.set_error(error);
  job.set_error_code(code);
  return job;
}

TEST(JobReasonTest, AWaitNamesWhatHoldsTheDevice) {
  EXPECT_EQ(ReasonSlug(Queued("device 0 is held by session s-3f2a")), "session-holds-dev0");
  EXPECT_EQ(ReasonSlug(Queued("device 1 runs job-000004")), "job-holds-dev1");
  EXPECT_EQ(ReasonSlug(Queued("device 2 goes first to job-000005, queued ahead")),
            "job-ahead-dev2");
  EXPECT_EQ(ReasonSlug(Queued("device 3 goes first to a job being submitted")),
            "submission-first-dev3");
  EXPECT_EQ(ReasonSlug(Queued("memory: needs 2.00 GiB, free 1.00 GiB on device 1 while session "
                              "s-1 holds it")),
            "memory-short-dev1");
  EXPECT_EQ(ReasonText(Queued("device 0 is held by session s-3f2a")),
            "device 0 is held by session s-3f2a");
}

TEST(JobReasonTest, AnErrorIsItsCodeOrItsFewWords) {
  EXPECT_EQ(ReasonSlug(Ended(v1::FAILED, "daemon restarted", 14)), "daemon-restarted");
  EXPECT_EQ(ReasonSlug(Ended(v1::FAILED,
                             "DATA_LOSS: job 46: its stored result does not parse (the state "
                             "directory is damaged)")),
            "data-loss");
  EXPECT_EQ(ReasonSlug(Ended(v1::FAILED, "op fc1: m must be divisible by tp, got 511 and 2", 3)),
            "invalid-argument");
  EXPECT_EQ(ReasonSlug(Ended(v1::ABORTED, "rank 1 stopped answering at step 3")), "rank-1-stopped");
  EXPECT_EQ(ReasonText(Ended(v1::FAILED, "first line\nsecond")), "first line");
}

TEST(JobReasonTest, NoneIsADash) {
  EXPECT_EQ(ReasonSlug(v1::Job()), "-");
  EXPECT_EQ(ReasonText(v1::Job()), "");
  // A wait that a running job left behind is no reason.
  v1::Job running = Queued("device 0 runs job-000001");
  running.set_state(v1::RUNNING);
  EXPECT_EQ(ReasonSlug(running), "-");
}

TEST(JobReasonTest, EverySlugIsOneShortWord) {
  for (const v1::Job& job :
       {Queued("device 12 is held by session a b c"),
        Ended(v1::FAILED, std::string(300, 'x') + " y z w"),
        Ended(v1::CANCELLED, "  cancelled by uid:1000 (alice) at 2026-12-06T18:32:26Z  ", 1)}) {
    const std::string slug = ReasonSlug(job);
    EXPECT_EQ(slug.find_first_of(" \t\n"), std::string::npos) << slug;
    EXPECT_LE(slug.size(), 32u) << slug;
    EXPECT_FALSE(slug.empty());
  }
}

}  // namespace
}  // namespace overlap::client
