#include "server/jobs/job_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "server/jobs/job_queue.h"
#include "server/wire/job_wire.h"
#include "tests/server/test_util.h"

namespace overlap::jobs {
namespace {

using ::overlap::testing::FakeRunner;
using ::overlap::testing::RunRecord;
using ::overlap::testing::TempDir;

JobRecord MakeJob(uint64_t sequence, JobState state, std::vector<int> devices) {
  JobRecord job;
  job.sequence = sequence;
  job.id = JobIdForSequence(sequence);
  job.state = state;
  job.name = "job" + std::to_string(sequence);
  job.priority = static_cast<int>(sequence % 3);
  job.devices = devices;
  job.spec = "ops: []\n";
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
    JobRecord job = MakeJob(7, JobState::kSucceeded, {0, 1});
    job.start_time_ms = 1000;
    job.end_time_ms = 3500;
    job.result.backend = "host";
    job.result.ops.emplace_back().id = "ag";
    job.result.total_step_ms = 1.25;
    ASSERT_TRUE((*store)->Put(job).ok());
    ASSERT_TRUE((*store)->Put(MakeJob(8, JobState::kQueued, {1})).ok());
  }
  auto store = JobStore::Open(state_dir);
  ASSERT_TRUE(store.ok()) << store.status();
  auto job = (*store)->Get("job-000007");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state, JobState::kSucceeded);
  EXPECT_EQ(job->result.ops[0].id, "ag");
  EXPECT_DOUBLE_EQ(job->result.total_step_ms, 1.25);
  EXPECT_EQ(job->devices.size(), 2u);
  EXPECT_EQ(*(*store)->MaxSequence(), 8u);

  EXPECT_EQ((*store)->Get("job-000009").status().code(), absl::StatusCode::kNotFound);

  auto all = (*store)->List(std::nullopt, 0);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].id, "job-000007");  // oldest first without a limit
  auto newest = (*store)->List(std::nullopt, 1);
  ASSERT_EQ(newest->size(), 1u);
  EXPECT_EQ((*newest)[0].id, "job-000008");
  auto queued = (*store)->List(JobState::kQueued, 0);
  ASSERT_EQ(queued->size(), 1u);
  EXPECT_EQ((*queued)[0].id, "job-000008");

  auto counts = (*store)->CountByState();
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ((*counts)[JobState::kSucceeded], 1);
  EXPECT_EQ((*counts)[JobState::kQueued], 1);

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

// A damaged database is DATA_LOSS naming the file and what to do, and is left
// as it was: starting afresh over it would drop every job it holds.
TEST(JobStoreTest, DamagedDatabaseIsDataLossAndLeftAlone) {
  TempDir dir;
  const std::string path = dir.path() + "/" + kStoreFileName;
  {
    auto store = JobStore::Open(dir.path());
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Put(MakeJob(1, JobState::kQueued, {0})).ok());
  }
  // Overwrite the schema page past SQLite's 100-byte file header.
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  std::fseek(f, 100, SEEK_SET);
  const std::string garbage(2000, '\x5a');
  std::fwrite(garbage.data(), 1, garbage.size(), f);
  std::fclose(f);
  const auto size = std::filesystem::file_size(path);

  auto store = JobStore::Open(dir.path());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
  EXPECT_THAT(store.status().message(), ::testing::HasSubstr(path + ": "));
  EXPECT_THAT(store.status().message(),
              ::testing::HasSubstr("the job database is damaged: restore it from a backup, or "
                                   "move " +
                                   path + "* aside"));
  EXPECT_EQ(std::filesystem::file_size(path), size);
}

// Jobs whose stored bytes no longer parse. Reading one is DATA_LOSS naming it;
// a list shows it as its row's columns say, with the damage as its error; and a
// restart fails the damaged queued and running jobs rather than refusing to
// start, while the healthy queued one runs.
TEST(JobStoreTest, DamagedJobsAreNamedListedAndFailedOnRestart) {
  TempDir dir;
  {
    auto store = JobStore::Open(dir.path());
    ASSERT_TRUE(store.ok()) << store.status();
    JobRecord running = MakeJob(6, JobState::kRunning, {1, 2});
    running.start_time_ms = 30;
    for (const JobRecord& job :
         {running, MakeJob(7, JobState::kQueued, {0}), MakeJob(8, JobState::kQueued, {0})}) {
      ASSERT_TRUE((*store)->Put(job).ok());
    }
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir.path() + "/" + kStoreFileName).c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE jobs SET job = x'ffffffff' WHERE sequence IN (6, 7);", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);

  auto store = JobStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<JobRecord> job = (*store)->Get("job-000007");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(job.status().message(),
            "job store: job-000007 is unreadable (its stored data is damaged)");
  absl::StatusOr<std::vector<JobRecord>> listed = (*store)->List(std::nullopt, 0);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 3u);
  const JobRecord& damaged = (*listed)[0];
  EXPECT_EQ(damaged.id, "job-000006");
  EXPECT_EQ(damaged.state, JobState::kRunning);
  EXPECT_EQ(damaged.name, "job6");
  EXPECT_THAT(damaged.devices, ::testing::ElementsAre(1, 2));
  EXPECT_EQ(damaged.start_time_ms, 30);
  EXPECT_EQ(damaged.error_code, absl::StatusCode::kDataLoss);
  EXPECT_EQ(damaged.error,
            "job store: job-000006 is unreadable (its stored data is damaged): its spec and "
            "results are lost");
  EXPECT_EQ((*listed)[2].error, "");

  FakeRunner runner;
  auto queue = JobQueue::Create(
      store->get(),
      [&](const jobs::JobRecord& j, const jobs::GraphPtr&, const runner::RunHooks& h) {
        return runner.Run(j, h);
      },
      JobQueueOptions{});
  ASSERT_TRUE(queue.ok()) << queue.status();
  ASSERT_TRUE((*queue)->WaitIdle(absl::Seconds(10)));
  for (const char* id : {"job-000006", "job-000007"}) {
    absl::StatusOr<JobRecord> failed = (*queue)->Get(id);
    ASSERT_TRUE(failed.ok()) << failed.status();  // stored again, readable now
    EXPECT_EQ(failed->state, JobState::kFailed) << id;
    EXPECT_THAT(failed->error, ::testing::HasSubstr("its spec and results are lost")) << id;
    EXPECT_GT(failed->end_time_ms, 0) << id;
  }
  std::vector<RunRecord> records = runner.records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].id, "job-000008");
}

// Writes `blob` into `column` of `table` at the row of `sequence` from a
// connection of its own, as damage from outside the daemon would.
void OverwriteBlob(const std::string& db_path, const std::string& table, const std::string& column,
                   uint64_t sequence, const std::string& blob) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  const std::string sql = "UPDATE " + table + " SET " + column + " = ? WHERE sequence = ?;";
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK);
  sqlite3_bind_blob(stmt, 1, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(stmt, 2, static_cast<sqlite3_int64>(sequence));
  EXPECT_EQ(sqlite3_step(stmt), SQLITE_DONE);
  EXPECT_EQ(sqlite3_changes(db), 1);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

// The stored bytes of `column` of `table` at the row of `sequence`.
std::string ReadBlob(const std::string& db_path, const std::string& table,
                     const std::string& column, uint64_t sequence) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  const std::string sql = "SELECT " + column + " FROM " + table + " WHERE sequence = ?;";
  sqlite3_stmt* stmt = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK);
  sqlite3_bind_int64(stmt, 1, static_cast<sqlite3_int64>(sequence));
  std::string out;
  if (sqlite3_step(stmt) == SQLITE_ROW) {
    out.assign(static_cast<const char*>(sqlite3_column_blob(stmt, 0)),
               sqlite3_column_bytes(stmt, 0));
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return out;
}

// Bits flipped inside a stored job row. Most flips still leave a protobuf that
// parses (a field turned into an unknown one, one value into another): such a
// row once came back as a job with an empty id. Every flip inside the id,
// sequence or state is DATA_LOSS naming the job, and no flip anywhere yields a
// job with another identity or state; a list shows the row as its columns say.
TEST(JobStoreTest, FlippedBitsInAStoredJobAreDataLossNeverAnotherJob) {
  TempDir dir;
  auto store = JobStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  JobRecord job = MakeJob(7, JobState::kRunning, {0, 1});
  job.start_time_ms = 30;
  ASSERT_TRUE((*store)->Put(job).ok());
  const std::string path = dir.path() + "/" + kStoreFileName;
  const std::string blob = ReadBlob(path, "jobs", "job", 7);
  ASSERT_EQ(blob, wire::ToProto(job).SerializeAsString()) << "the row holds the job as serialized";

  // Where the id, sequence and state lie: each field serialized alone is its bytes.
  std::vector<bool> identity(blob.size(), false);
  v1::Job id_alone, state_alone, sequence_alone;
  id_alone.set_id(job.id);
  state_alone.set_state(wire::ToProto(job.state));
  sequence_alone.set_sequence(job.sequence);
  for (const v1::Job* field : {&id_alone, &state_alone, &sequence_alone}) {
    const std::string bytes = field->SerializeAsString();
    const size_t at = blob.find(bytes);
    ASSERT_NE(at, std::string::npos);
    for (size_t i = at; i < at + bytes.size(); ++i) identity[i] = true;
  }

  int data_loss = 0, identity_flips = 0;
  for (size_t i = 0; i < blob.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string damaged = blob;
      damaged[i] = static_cast<char>(damaged[i] ^ (1 << bit));
      OverwriteBlob(path, "jobs", "job", 7, damaged);
      const absl::StatusOr<JobRecord> got = (*store)->Get("job-000007");
      SCOPED_TRACE(::testing::Message() << "byte " << i << " bit " << bit);
      if (got.ok()) {
        EXPECT_FALSE(identity[i]) << "a flip in the id, sequence or state passed";
        EXPECT_EQ(got->id, "job-000007");
        EXPECT_EQ(got->sequence, 7u);
        EXPECT_EQ(got->state, JobState::kRunning);
        continue;
      }
      EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
      EXPECT_EQ(got.status().message(),
                "job store: job-000007 is unreadable (its stored data is damaged)");
      ++data_loss;
      if (identity[i]) ++identity_flips;
    }
  }
  EXPECT_EQ(identity_flips, 8 * static_cast<int>(std::count(identity.begin(), identity.end(), true)));
  EXPECT_GT(data_loss, identity_flips) << "flips elsewhere that break the parse are caught too";

  // The id's tag flipped to field 9's: the blob parses, the id becomes an
  // unknown field, and the job has an empty id (what a Get once returned).
  // Listed as the row's columns say.
  std::string tag_flipped = blob;
  tag_flipped[0] = static_cast<char>(tag_flipped[0] ^ 0x40);
  v1::Job parsed;
  ASSERT_TRUE(parsed.ParseFromString(tag_flipped));
  EXPECT_EQ(parsed.id(), "");
  OverwriteBlob(path, "jobs", "job", 7, tag_flipped);
  absl::StatusOr<std::vector<JobRecord>> listed = (*store)->List(std::nullopt, 0);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].id, "job-000007");
  EXPECT_EQ((*listed)[0].state, JobState::kRunning);
  EXPECT_EQ((*listed)[0].error_code, absl::StatusCode::kDataLoss);
}

// A summary that parses as another job, and an op result row that parses but
// holds no op, are DATA_LOSS too.
TEST(JobStoreTest, DamagedSummariesAndOpRowsAreDataLoss) {
  TempDir dir;
  auto store = JobStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Put(MakeJob(7, JobState::kRunning, {0})).ok());
  runner::OpReport op;
  op.id = "ag";
  ASSERT_TRUE((*store)->PutOpResult(7, 0, runner::JobReport(), op).ok());
  ASSERT_EQ((*store)->Get("job-000007")->result.ops.size(), 1u);
  const std::string path = dir.path() + "/" + kStoreFileName;

  std::string summary = ReadBlob(path, "summaries", "summary", 7);
  ASSERT_FALSE(summary.empty());
  summary[0] = static_cast<char>(summary[0] ^ 0x40);  // the id's tag: parses, without an id
  OverwriteBlob(path, "summaries", "summary", 7, summary);
  absl::StatusOr<JobPage> page = (*store)->ListSummaries(std::nullopt, 10, 0);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->jobs.size(), 1u);
  EXPECT_EQ(page->jobs[0].id, "job-000007");
  EXPECT_EQ(page->jobs[0].error_code, absl::StatusCode::kDataLoss);
  EXPECT_EQ(page->jobs[0].error,
            "job store: job-000007 is unreadable (its stored data is damaged): its spec and "
            "results are lost");

  OverwriteBlob(path, "op_results", "result", 7, "");  // parses: a result with no op
  const absl::StatusOr<JobRecord> got = (*store)->Get("job-000007");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_EQ(got.status().message(), "job store: an op result of job-000007 is unreadable");
}

// A row as a daemon before the job core had its own types wrote it (a layer
// step traced and verified: tests/data/wire/job-layer.pb, its `jobs` blob)
// reads back as the same job, and is stored again as the same message.
TEST(JobStoreTest, ReadsRowsWrittenBeforeTheJobCoreHadItsOwnTypes) {
  std::ifstream in(std::string(OVERLAP_SOURCE_DIR) + "/tests/data/wire/job-layer.pb",
                   std::ios::binary);
  const std::string old_blob((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  v1::Job old_job;
  ASSERT_TRUE(old_job.ParseFromString(old_blob));
  ASSERT_EQ(old_job.id(), "job-000001");
  ASSERT_EQ(old_job.state(), v1::SUCCEEDED);
  TempDir dir;
  auto store = JobStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Put(MakeJob(1, JobState::kSucceeded, {0, 1})).ok());
  const std::string path = dir.path() + "/" + kStoreFileName;
  OverwriteBlob(path, "jobs", "job", 1, old_blob);

  absl::StatusOr<JobRecord> job = (*store)->Get("job-000001");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->result.ops.size(), 3u);
  ASSERT_TRUE(job->result.layer.has_value());
  EXPECT_EQ(job->priority_class, PriorityClass::kCritical);  // a row from before the key
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(wire::ToProto(*job), old_job));
  ASSERT_TRUE((*store)->Put(*job).ok());
  v1::Job stored_again;
  ASSERT_TRUE(stored_again.ParseFromString(ReadBlob(path, "jobs", "job", 1)));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(stored_again, old_job));
}

// A job's end that the store cannot take (a full disk; here a trigger refuses
// SUCCEEDED rows) is served from memory rather than its stale RUNNING row, and
// is stored once the store takes writes again.
TEST(JobStoreTest, AnEndTheStoreCannotTakeIsKeptAndStoredLater) {
  TempDir dir;
  auto store = JobStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string path = dir.path() + "/" + kStoreFileName;
  auto sql = [&](const char* statement) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, statement, nullptr, nullptr, nullptr), SQLITE_OK) << statement;
    sqlite3_close(db);
  };
  sql("CREATE TRIGGER full BEFORE INSERT ON jobs WHEN NEW.state = 3 "
      "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;");

  FakeRunner runner;
  auto queue = JobQueue::Create(
      store->get(),
      [&](const jobs::JobRecord& j, const jobs::GraphPtr&, const runner::RunHooks& h) {
        return runner.Run(j, h);
      },
      JobQueueOptions{});
  ASSERT_TRUE(queue.ok()) << queue.status();
  JobRecord job;
  job.name = "sleep:1";
  job.devices.push_back(0);
  ASSERT_TRUE((*queue)->Submit(job).ok());
  ASSERT_TRUE((*queue)->WaitIdle(absl::Seconds(10)));
  EXPECT_EQ((*store)->Get("job-000001")->state, JobState::kRunning) << "the stale row";
  EXPECT_EQ((*queue)->Get("job-000001")->state, JobState::kSucceeded);
  auto listed = (*queue)->List(std::nullopt, 0);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].state, JobState::kSucceeded);
  EXPECT_EQ((*queue)->Cancel("job-000001").status().code(),
            absl::StatusCode::kFailedPrecondition);

  // Room again: the next job's first store takes the first job's end too.
  sql("DROP TRIGGER full;");
  job.name = "sleep:1";
  ASSERT_TRUE((*queue)->Submit(job).ok());
  ASSERT_TRUE((*queue)->WaitIdle(absl::Seconds(10)));
  EXPECT_EQ((*store)->Get("job-000001")->state, JobState::kSucceeded);
  EXPECT_EQ((*store)->Get("job-000002")->state, JobState::kSucceeded);
}

// A daemon that stopped with jobs running and queued comes back with the running
// one FAILED "daemon restarted", the queued ones run again in their old order
// under their old ids, and new ids continue the sequence.
TEST(JobStoreTest, RestartRecovery) {
  TempDir dir;
  {
    auto store = JobStore::Open(dir.path());
    ASSERT_TRUE(store.ok());
    JobRecord done = MakeJob(1, JobState::kSucceeded, {0});
    done.start_time_ms = 10;
    done.end_time_ms = 20;
    JobRecord running = MakeJob(2, JobState::kRunning, {0});
    running.start_time_ms = 30;
    JobRecord queued_a = MakeJob(3, JobState::kQueued, {0});
    queued_a.name = "sleep:1";
    queued_a.priority = 0;
    JobRecord queued_b = MakeJob(4, JobState::kQueued, {0});
    queued_b.name = "sleep:1";
    queued_b.priority = 0;
    for (const JobRecord& job : {done, running, queued_a, queued_b}) {
      ASSERT_TRUE((*store)->Put(job).ok());
    }
  }
  auto store = JobStore::Open(dir.path());
  ASSERT_TRUE(store.ok());
  FakeRunner runner;
  JobQueueOptions options;
  options.executor_threads = 2;
  auto queue = JobQueue::Create(
      store->get(),
      [&](const jobs::JobRecord& j, const jobs::GraphPtr&, const runner::RunHooks& h) {
        return runner.Run(j, h);
      },
      options);
  ASSERT_TRUE(queue.ok()) << queue.status();

  auto restarted = (*queue)->Get("job-000002");
  ASSERT_TRUE(restarted.ok());
  EXPECT_EQ(restarted->state, JobState::kFailed);
  EXPECT_EQ(restarted->error, "daemon restarted");
  EXPECT_GE(restarted->end_time_ms, restarted->start_time_ms);

  JobRecord fresh;
  fresh.name = "sleep:1";
  fresh.devices.push_back(0);
  auto submitted = (*queue)->Submit(fresh);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  EXPECT_EQ(submitted->id, "job-000005");
  EXPECT_EQ(submitted->sequence, 5u);

  ASSERT_TRUE((*queue)->WaitIdle(absl::Seconds(10)));
  for (const char* id : {"job-000003", "job-000004", "job-000005"}) {
    auto job = (*queue)->Get(id);
    ASSERT_TRUE(job.ok());
    EXPECT_EQ(job->state, JobState::kSucceeded) << id;
  }
  std::vector<RunRecord> records = runner.records();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].id, "job-000003");
  EXPECT_EQ(records[1].id, "job-000004");
  EXPECT_EQ(records[2].id, "job-000005");
  // The earlier history is still listed.
  auto all = (*queue)->List(std::nullopt, 0);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 5u);
  EXPECT_EQ((*all)[0].state, JobState::kSucceeded);
}

JobRecord Finished(uint64_t sequence, JobState state, std::vector<int> devices, int64_t start_ms,
                   int64_t end_ms) {
  JobRecord job = MakeJob(sequence, state, std::move(devices));
  job.start_time_ms = start_ms;
  job.end_time_ms = end_ms;
  return job;
}

std::vector<std::string> StoredIds(JobStore& store) {
  std::vector<std::string> ids;
  const absl::StatusOr<std::vector<JobRecord>> jobs = store.List(std::nullopt, 0);
  EXPECT_TRUE(jobs.ok()) << jobs.status();
  for (const JobRecord& job : jobs.value_or(std::vector<JobRecord>{})) ids.push_back(job.id);
  return ids;
}

// Retention keeps the finished jobs that ended last (a job that ran long and
// ended late is "newer" than one submitted after it), never touches queued or
// running ones, and what the pruned jobs counted for stays counted.
TEST(JobStoreTest, PruneKeepsTheLastToEndAndWhatThePrunedCountedFor) {
  TempDir dir;
  auto store = JobStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  JobStore& s = **store;
  ASSERT_TRUE(s.Put(Finished(1, JobState::kSucceeded, {0, 1}, 1000, 9000)).ok());  // ends last
  ASSERT_TRUE(s.Put(Finished(2, JobState::kFailed, {0}, 2000, 2500)).ok());
  ASSERT_TRUE(
      s.Put(Finished(3, JobState::kCancelled, {1}, 0, 3000)).ok());  // cancelled while queued
  ASSERT_TRUE(s.Put(Finished(4, JobState::kAborted, {1}, 4000, 4100)).ok());
  ASSERT_TRUE(s.Put(Finished(5, JobState::kSucceeded, {0}, 5000, 6000)).ok());
  JobRecord running = MakeJob(6, JobState::kRunning, {0});
  running.start_time_ms = 7000;
  ASSERT_TRUE(s.Put(running).ok());
  ASSERT_TRUE(s.Put(MakeJob(7, JobState::kQueued, {1})).ok());
  const auto counts_before = *s.CountByState();
  const auto usage_before = *s.UsageByDevice();

  auto pruned = s.Prune(RetentionPolicy{/*keep_jobs=*/2, /*keep_ms=*/0}, /*now_ms=*/10000);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_EQ(*pruned, 3);
  EXPECT_EQ(StoredIds(s),
            (std::vector<std::string>{"job-000001", "job-000005", "job-000006", "job-000007"}));

  const auto counts_after = *s.CountByState();
  EXPECT_EQ(counts_after, counts_before);
  EXPECT_EQ(counts_after.at(JobState::kFailed), 1);
  EXPECT_EQ(counts_after.at(JobState::kAborted), 1);
  const auto usage_after = *s.UsageByDevice();
  ASSERT_EQ(usage_after.size(), usage_before.size());
  for (const auto& [device, u] : usage_before) {
    EXPECT_DOUBLE_EQ(usage_after.at(device).busy_ms, u.busy_ms) << device;
    EXPECT_EQ(usage_after.at(device).jobs_run, u.jobs_run) << device;
  }
  EXPECT_DOUBLE_EQ(usage_after.at(0).busy_ms, 8000 + 500 + 1000);
  EXPECT_EQ(usage_after.at(1).jobs_run, 2);  // jobs 1 and 4; 3 and 7 never started

  // Nothing more to prune: a second pass changes nothing.
  EXPECT_EQ(*s.Prune(RetentionPolicy{2, 0}, 10000), 0);
  EXPECT_EQ(*s.CountByState(), counts_before);
}

TEST(JobStoreTest, PruneByAgeAndNoLimitMeansKeepAll) {
  TempDir dir;
  auto store = JobStore::Open(dir.path());
  ASSERT_TRUE(store.ok());
  JobStore& s = **store;
  for (uint64_t i = 1; i <= 4; ++i) {
    ASSERT_TRUE(s.Put(Finished(i, JobState::kSucceeded, {0}, 100 * i, 1000 * i)).ok());
  }
  EXPECT_EQ(*s.Prune(RetentionPolicy{}, 1'000'000), 0) << "no limit given";
  EXPECT_EQ(StoredIds(s).size(), 4u);
  // now 5000, keep 2500 ms: jobs that ended before 2500 go.
  EXPECT_EQ(*s.Prune(RetentionPolicy{0, 2500}, 5000), 2);
  EXPECT_EQ(StoredIds(s), (std::vector<std::string>{"job-000003", "job-000004"}));
  // Both limits: either one prunes.
  EXPECT_EQ(*s.Prune(RetentionPolicy{1, 1'000'000}, 5000), 1);
  EXPECT_EQ(StoredIds(s), (std::vector<std::string>{"job-000004"}));
}

// Pruning the job with the highest id must not give that id out again, after a
// restart too, and asking for a pruned job says why it is gone.
TEST(JobStoreTest, PrunedIdsAreNeverReusedAndSayWhyTheyAreGone) {
  TempDir dir;
  {
    auto store = JobStore::Open(dir.path());
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Put(Finished(1, JobState::kSucceeded, {0}, 10, 20)).ok());
    ASSERT_TRUE((*store)->Put(Finished(2, JobState::kFailed, {0}, 30, 40)).ok());
    EXPECT_EQ(*(*store)->Prune(RetentionPolicy{0, 5}, 100), 2);
    EXPECT_TRUE(StoredIds(**store).empty());
  }
  auto store = JobStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->MaxSequence(), 2u);
  EXPECT_EQ((*(*store)->CountByState())[JobState::kFailed], 1) << "the totals are on disk";

  auto gone = (*store)->Get("job-000002");
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(gone.status().message()),
              ::testing::HasSubstr("keep_finished_jobs, keep_finished_days"));
  auto never = (*store)->Get("job-000003");
  EXPECT_EQ(never.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(never.status().message(), "job job-000003 not found");
  EXPECT_EQ((*store)->Get("nonsense").status().message(), "job nonsense not found");
}

// A database written by the first schema (jobs table only) opens, is upgraded
// in place, and prunes.
TEST(JobStoreTest, OpensAndUpgradesAVersionOneDatabase) {
  TempDir dir;
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir.path() + "/" + kStoreFileName).c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE jobs (id TEXT PRIMARY KEY, sequence INTEGER NOT NULL "
                           "UNIQUE, state INTEGER NOT NULL, priority INTEGER NOT NULL, name TEXT "
                           "NOT NULL, devices TEXT NOT NULL, start_time_ms INTEGER NOT NULL, "
                           "end_time_ms INTEGER NOT NULL, job BLOB NOT NULL); "
                           "PRAGMA user_version=1;",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  auto store = JobStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Put(Finished(1, JobState::kSucceeded, {0}, 10, 20)).ok());
  ASSERT_TRUE((*store)->Put(Finished(2, JobState::kSucceeded, {0}, 30, 40)).ok());
  EXPECT_EQ(*(*store)->Prune(RetentionPolicy{1, 0}, 100), 1);
  EXPECT_EQ((*(*store)->CountByState())[JobState::kSucceeded], 2);
}

// The part of a job that this node coordinates is not counted beside that job:
// a job spanning daemons counts once per node, before and after pruning.
TEST(JobStoreTest, CountsAJobSpanningDaemonsOncePerNode) {
  TempDir dir;
  auto store = JobStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Put(Finished(1, JobState::kSucceeded, {0}, 10, 20)).ok());
  JobRecord own_part = Finished(2, JobState::kSucceeded, {0}, 10, 20);
  own_part.counted_as_coordinated = true;
  ASSERT_TRUE((*store)->Put(own_part).ok());
  ASSERT_TRUE((*store)->Put(Finished(3, JobState::kFailed, {1}, 30, 40)).ok());
  EXPECT_EQ((*(*store)->CountByState())[JobState::kSucceeded], 1);
  EXPECT_EQ(*(*store)->Prune(RetentionPolicy{1, 0}, 100), 2);
  EXPECT_EQ((*(*store)->CountByState())[JobState::kSucceeded], 1) << "pruning kept the count";
  EXPECT_EQ((*(*store)->CountByState())[JobState::kFailed], 1);
}

// The job queue applies its retention policy as jobs end: the history holds
// the last few, the stats all of them.
TEST(JobStoreTest, JobQueuePrunesAsJobsEnd) {
  TempDir dir;
  auto store = JobStore::Open(dir.path());
  ASSERT_TRUE(store.ok());
  FakeRunner runner;
  JobQueueOptions options;
  options.retention.keep_jobs = 2;
  auto queue = JobQueue::Create(
      store->get(),
      [&](const jobs::JobRecord& j, const jobs::GraphPtr&, const runner::RunHooks& h) {
        return runner.Run(j, h);
      },
      options);
  ASSERT_TRUE(queue.ok()) << queue.status();
  for (int i = 0; i < 5; ++i) {
    JobRecord job;
    job.name = "sleep:1";
    job.devices.push_back(0);
    ASSERT_TRUE((*queue)->Submit(job).ok());
  }
  ASSERT_TRUE((*queue)->WaitIdle(absl::Seconds(10)));
  auto listed = (*queue)->List(std::nullopt, 0);
  ASSERT_TRUE(listed.ok());
  std::vector<std::string> ids;
  for (const JobRecord& job : *listed) ids.push_back(job.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"job-000004", "job-000005"}));
  auto stats = (*queue)->GetStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->jobs_by_state.at(JobState::kSucceeded), 5);
  EXPECT_EQ(stats->devices.at(0).jobs_run, 5);
}

}  // namespace
}  // namespace overlap::jobs
