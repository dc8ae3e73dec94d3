// Job lifecycle through the real daemon: cancelling a running job, a full
// queue, draining on SIGTERM, and recovery after a restart or a SIGKILL.
#include <signal.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"

namespace overlap::testing {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class LifecycleTest : public DaemonTest {};

TEST_F(LifecycleTest, CancelARunningJob) {
  StartDaemon();
  // `submit --wait` follows the job; it must exit 1 once the job is cancelled.
  std::unique_ptr<Child> waiter = daemon_->CtlAsync({"submit", long_graph_, "--wait"});
  nlohmann::json listed;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  std::string id;
  while (id.empty() && Clock::now() < deadline) {
    RunResult list = daemon_->Ctl({"list", "--state", "running", "--json"});
    ASSERT_EQ(list.exit_code, 0) << Describe(list);
    listed = ParseJson(list.out);
    if (!listed["jobs"].empty()) id = listed["jobs"][0]["id"];
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_FALSE(id.empty()) << "the long job never showed RUNNING";
  nlohmann::json running = PollJob(*daemon_, id, StateIs("RUNNING"));
  EXPECT_EQ(running["progress"]["op_id"], "big");

  RunResult cancel = daemon_->Ctl({"cancel", id});
  ASSERT_EQ(cancel.exit_code, 0) << Describe(cancel);
  EXPECT_EQ(cancel.out, "job " + id + ": cancel requested (it was RUNNING; overlapctl cancel --wait " +
                           id + " waits for it to end)\n");

  RunResult waited = waiter->Wait(std::chrono::seconds(30));
  EXPECT_EQ(waited.exit_code, 1) << Describe(waited);
  EXPECT_THAT(waited.err, HasSubstr("overlapctl: job " + id + " CANCELLED"));
  EXPECT_THAT(waited.out, HasSubstr("state: CANCELLED"));

  nlohmann::json job = PollJob(*daemon_, id, StateIs("CANCELLED"), std::chrono::seconds(5));
  EXPECT_EQ(job["state"], "CANCELLED");
  EXPECT_GT(job["end_time_ms"].get<int64_t>(), 0);

  RunResult watch = daemon_->Ctl({"watch", id});
  EXPECT_EQ(watch.exit_code, 1) << Describe(watch);
  RunResult report = daemon_->Ctl({"report", id});
  EXPECT_EQ(report.exit_code, 1) << Describe(report);
  EXPECT_THAT(report.err, HasSubstr("CANCELLED"));

  // The devices are free again: a small job runs to completion.
  RunResult small = daemon_->Ctl({"submit", small_graph_, "--wait"});
  EXPECT_EQ(small.exit_code, 0) << Describe(small);
}

TEST_F(LifecycleTest, CancelAQueuedJob) {
  StartDaemon();
  const std::string running = Submit(long_graph_);
  const std::string queued = Submit(small_graph_);
  PollJob(*daemon_, running, StateIs("RUNNING"));
  EXPECT_EQ(PollJob(*daemon_, queued, StateIs("QUEUED"))["state"], "QUEUED");
  RunResult cancel = daemon_->Ctl({"cancel", queued, "--json"});
  ASSERT_EQ(cancel.exit_code, 0) << Describe(cancel);
  EXPECT_EQ(ParseJson(cancel.out)["state"], "CANCELLED");
  EXPECT_EQ(daemon_->Ctl({"cancel", running}).exit_code, 0);
  PollJob(*daemon_, running, StateIs("CANCELLED"));
}

TEST_F(LifecycleTest, FullQueueIsResourceExhausted) {
  StartDaemon({"--max-queued-jobs", "1"});
  const std::string running = Submit(long_graph_);
  PollJob(*daemon_, running, StateIs("RUNNING"));
  const std::string queued = Submit(small_graph_);  // the one queue slot
  RunResult refused = daemon_->Ctl({"submit", small_graph_});
  EXPECT_EQ(refused.exit_code, 3) << Describe(refused);
  EXPECT_THAT(refused.err, StartsWith("overlapctl: RESOURCE_EXHAUSTED: "));
  EXPECT_THAT(refused.err, HasSubstr("queue"));
  EXPECT_EQ(daemon_->Ctl({"node"}).exit_code, 0);

  // Once the long job is gone the queued one runs.
  ASSERT_EQ(daemon_->Ctl({"cancel", running}).exit_code, 0);
  RunResult watch = daemon_->Ctl({"watch", queued});
  EXPECT_EQ(watch.exit_code, 0) << Describe(watch);
}

TEST_F(LifecycleTest, SigtermDrainsThenRestartKeepsEveryJob) {
  StartDaemon({"--drain-timeout", "2"});
  RunResult done = daemon_->Ctl({"submit", small_graph_, "--wait", "--json"});
  ASSERT_EQ(done.exit_code, 0) << Describe(done);
  const nlohmann::json finished = ParseJson(done.out);
  const std::string long_id = Submit(long_graph_);
  PollJob(*daemon_, long_id, StateIs("RUNNING"));

  const auto start = Clock::now();
  RunResult exited = daemon_->Terminate(std::chrono::seconds(20));
  EXPECT_FALSE(exited.timed_out);
  EXPECT_EQ(exited.exit_code, 0) << daemon_->Log();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10)) << "drain timeout is 2 s";

  StartDaemon({"--drain-timeout", "2"});
  RunResult list = daemon_->Ctl({"list", "--json"});
  ASSERT_EQ(list.exit_code, 0) << Describe(list);
  const nlohmann::json jobs = ParseJson(list.out)["jobs"];
  ASSERT_EQ(jobs.size(), 2u) << list.out;
  nlohmann::json long_job = PollJob(*daemon_, long_id, [](const nlohmann::json& j) {
    return j["state"] == "CANCELLED" || j["state"] == "SUCCEEDED";
  });
  EXPECT_THAT(long_job["state"].get<std::string>(), AnyOf("CANCELLED", "SUCCEEDED"));
  RunResult get = daemon_->Ctl({"get", finished["id"], "--json"});
  ASSERT_EQ(get.exit_code, 0) << Describe(get);
  const nlohmann::json again = ParseJson(get.out);
  EXPECT_EQ(again["state"], "SUCCEEDED");
  EXPECT_EQ(again["result"], finished["result"]) << "results survive the restart";
  RunResult report = daemon_->Ctl({"report", finished["id"]});
  EXPECT_EQ(report.exit_code, 0) << Describe(report);
  EXPECT_THAT(report.out, HasSubstr("\nfc1 "));
}

// Retention: the database keeps the finished jobs asked for, a pruned job's id
// answers NOT_FOUND with the reason, ids are not given out again after a
// restart, and the stats still count every job.
TEST_F(LifecycleTest, RetentionPrunesFinishedJobsAndNeverReusesTheirIds) {
  StartDaemon({"--keep-finished-jobs", "1"});
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    RunResult done = daemon_->Ctl({"submit", small_graph_, "--wait", "--json"});
    ASSERT_EQ(done.exit_code, 0) << Describe(done);
    ids.push_back(ParseJson(done.out)["id"]);
  }
  RunResult list = daemon_->Ctl({"list", "--json"});
  ASSERT_EQ(list.exit_code, 0) << Describe(list);
  nlohmann::json jobs = ParseJson(list.out)["jobs"];
  ASSERT_EQ(jobs.size(), 1u) << list.out;
  EXPECT_EQ(jobs[0]["id"], ids[1]);
  RunResult gone = daemon_->Ctl({"get", ids[0]});
  EXPECT_EQ(gone.exit_code, 3) << Describe(gone);
  EXPECT_THAT(gone.err, StartsWith("overlapctl: NOT_FOUND: job " + ids[0] + " not found: "));
  EXPECT_THAT(gone.err, HasSubstr("keep_finished_jobs"));

  ASSERT_EQ(daemon_->Terminate(std::chrono::seconds(20)).exit_code, 0) << daemon_->Log();
  StartDaemon({"--keep-finished-jobs", "1"});
  RunResult third = daemon_->Ctl({"submit", small_graph_, "--wait", "--json"});
  ASSERT_EQ(third.exit_code, 0) << Describe(third);
  EXPECT_EQ(ParseJson(third.out)["id"], "job-000003");
  RunResult stats = daemon_->Ctl({"stats", "--json"});
  ASSERT_EQ(stats.exit_code, 0) << Describe(stats);
  EXPECT_EQ(ParseJson(stats.out)["jobs_by_state"]["SUCCEEDED"], 3) << stats.out;
}

TEST_F(LifecycleTest, SigkilledRunningJobFailsAndQueuedJobRunsAfterRestart) {
  StartDaemon();
  const std::string long_id = Submit(long_graph_);
  PollJob(*daemon_, long_id, StateIs("RUNNING"));
  std::unique_ptr<Child> watcher = daemon_->CtlAsync({"watch", long_id});
  const std::string queued_id = Submit(small_graph_);
  EXPECT_EQ(PollJob(*daemon_, queued_id, StateIs("QUEUED"))["state"], "QUEUED");
  daemon_->Kill();

  // A client following the job loses the daemon: exit 2, naming the address.
  RunResult watched = watcher->Wait(std::chrono::seconds(20));
  EXPECT_EQ(watched.exit_code, 2) << Describe(watched);
  EXPECT_THAT(watched.err,
              HasSubstr("overlapctl: cannot reach overlapd at " + daemon_->address() + ": "));

  StartDaemon();
  nlohmann::json killed = PollJob(*daemon_, long_id, StateIs("FAILED"), std::chrono::seconds(10));
  EXPECT_EQ(killed["state"], "FAILED");
  EXPECT_THAT(killed["error"].get<std::string>(), HasSubstr("daemon restarted"));
  RunResult report = daemon_->Ctl({"report", long_id});
  EXPECT_EQ(report.exit_code, 1) << Describe(report);
  EXPECT_THAT(report.err, HasSubstr("FAILED: daemon restarted"));

  RunResult watch = daemon_->Ctl({"watch", queued_id});
  EXPECT_EQ(watch.exit_code, 0) << Describe(watch);
  EXPECT_THAT(watch.out, HasSubstr("\nout "));

  RunResult list = daemon_->Ctl({"list", "--json"});
  ASSERT_EQ(list.exit_code, 0) << Describe(list);
  EXPECT_EQ(ParseJson(list.out)["jobs"].size(), 2u);
}

// A damaged job database stops the daemon with exit 2 (systemd does not
// restart it: only an operator can help), saying what to do, and is left as it
// was rather than replaced by an empty one.
TEST_F(LifecycleTest, DamagedJobDatabaseExits2AndIsLeftAlone) {
  StartDaemon();
  Submit(small_graph_);
  ASSERT_EQ(daemon_->Terminate(std::chrono::seconds(20)).exit_code, 0) << daemon_->Log();
  const std::string db = daemon_->state_dir() + "/overlapd.db";
  std::string bytes = ReadFileOrEmpty(db);
  ASSERT_GT(bytes.size(), 2100u);
  bytes.replace(100, 2000, std::string(2000, 'Z'));  // past SQLite's 100-byte header
  WriteFileOrDie(db, bytes);

  RunResult run = Child::Spawn({OVERLAPD_BIN, "--backend", "host", "--listen", daemon_->address(),
                                "--state-dir", daemon_->state_dir()},
                               dir_.path())
                      ->Wait(std::chrono::seconds(20));
  EXPECT_EQ(run.exit_code, 2) << Describe(run);
  EXPECT_THAT(run.err, HasSubstr("the job database is damaged: restore it from a backup, or move " +
                                 db + "* aside"));
  EXPECT_EQ(ReadFileOrEmpty(db), bytes);
}


// Ctrl-C or SIGTERM (scancel, a Slurm time limit) on `submit --wait` cancels the
// job, so that nothing holds GPUs for a client that is gone; --detach and
// `watch` leave it running and say how to stop it.
TEST_F(LifecycleTest, AnInterruptedWaitCancelsItsJobUnlessDetached) {
  StartDaemon();
  const std::string graph = long_graph_;
  auto WaitForRunningJob = [&]() -> std::string {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < deadline) {
      const nlohmann::json listed =
          ParseJson(daemon_->Ctl({"list", "--state", "running", "--json"}).out);
      if (!listed["jobs"].empty()) return listed["jobs"][0]["id"];
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "no job showed RUNNING";
    return "";
  };
  auto GetJson = [&](const std::string& id) {
    return ParseJson(daemon_->Ctl({"get", id, "--json"}).out);
  };
  std::unique_ptr<Child> waiting = daemon_->CtlAsync({"submit", graph, "--wait"});
  const std::string id = WaitForRunningJob();
  waiting->Signal(SIGTERM);
  RunResult cancelled = waiting->Wait(std::chrono::seconds(30));
  EXPECT_EQ(cancelled.exit_code, 1) << Describe(cancelled);  // the job's end: CANCELLED
  EXPECT_THAT(cancelled.err, HasSubstr("interrupted: cancelled job " + id));
  EXPECT_EQ(PollJob(*daemon_, id, StateIs("CANCELLED"))["state"], "CANCELLED");

  std::unique_ptr<Child> detached = daemon_->CtlAsync({"submit", graph, "--wait", "--detach"});
  const std::string kept = WaitForRunningJob();
  detached->Signal(SIGINT);
  RunResult left = detached->Wait(std::chrono::seconds(30));
  EXPECT_EQ(left.exit_code, 128 + SIGINT) << Describe(left);
  EXPECT_THAT(left.err, HasSubstr("stopped watching; job " + kept + " goes on"));
  EXPECT_EQ(GetJson(kept)["state"], "RUNNING");

  std::unique_ptr<Child> watcher = daemon_->CtlAsync({"watch", kept});
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  watcher->Signal(SIGINT);
  RunResult watched = watcher->Wait(std::chrono::seconds(30));
  EXPECT_EQ(watched.exit_code, 128 + SIGINT) << Describe(watched);
  EXPECT_THAT(watched.err, HasSubstr("overlapctl cancel " + kept + " stops it"));
  EXPECT_EQ(GetJson(kept)["state"], "RUNNING");
  EXPECT_EQ(daemon_->Ctl({"cancel", kept, "--wait"}).out, "job " + kept + " CANCELLED\n");
}
}  // namespace
}  // namespace overlap::testing
