#include "server/jobs/job_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/sqlite_statement.h"

namespace overlap::jobs {
namespace {

// 2: pruned_states, pruned_devices and meta keep what retention deleted.
constexpr int kSchemaVersion = 2;

constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY,
  sequence INTEGER NOT NULL UNIQUE,
  state INTEGER NOT NULL,
  priority INTEGER NOT NULL,
  name TEXT NOT NULL,
  devices TEXT NOT NULL,
  start_time_ms INTEGER NOT NULL,
  end_time_ms INTEGER NOT NULL,
  job BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs(state, sequence);
CREATE TABLE IF NOT EXISTS pruned_states (
  state INTEGER PRIMARY KEY,
  jobs INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS pruned_devices (
  device INTEGER PRIMARY KEY,
  busy_ms REAL NOT NULL,
  jobs_run INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
  key TEXT PRIMARY KEY,
  value INTEGER NOT NULL
);
)sql";

constexpr char kMaxPrunedKey[] = "max_pruned_sequence";

// The states a job never leaves (scheduler.h, IsFinalState), as an SQL list.
std::string FinalStatesSql() {
  return absl::StrCat("(", v1::SUCCEEDED, ", ", v1::FAILED, ", ", v1::CANCELLED, ", ", v1::ABORTED,
                      ")");
}

// The status code for SQLite's last error on `db`: a full disk is
// RESOURCE_EXHAUSTED (the client may retry once there is room), a damaged file
// DATA_LOSS, the rest INTERNAL.
absl::Status StatusForSqlite(sqlite3* db, std::string message) {
  switch (sqlite3_errcode(db)) {
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(std::move(message));
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(std::move(message));
    default:
      return absl::InternalError(std::move(message));
  }
}

absl::Status SqliteError(sqlite3* db, absl::string_view what) {
  return StatusForSqlite(db, absl::StrCat("job store: ", what, ": ", sqlite3_errmsg(db)));
}

// A prepared statement whose failure to prepare reads as a job store error.
class Statement : public SqliteStatement {
 public:
  Statement(sqlite3* db, const char* sql) : SqliteStatement(db, sql), db_(db) {}

  absl::Status status(absl::string_view what) const {
    return prepared() ? absl::OkStatus() : SqliteError(db_, what);
  }

 private:
  sqlite3* db_;
};

absl::StatusOr<v1::Job> JobFromColumn(sqlite3_stmt* stmt, int column) {
  const void* blob = sqlite3_column_blob(stmt, column);
  const int bytes = sqlite3_column_bytes(stmt, column);
  v1::Job job;
  if (!job.ParseFromArray(blob, bytes)) {
    return absl::DataLossError(
        absl::StrCat("job store: ", JobIdForSequence(sqlite3_column_int64(stmt, 0)),
                     " is unreadable (its stored data is damaged)"));
  }
  return job;
}

// The devices column ("0,1,3"); entries that are not numbers are skipped.
std::vector<int> DevicesFromColumn(const unsigned char* text) {
  std::vector<int> devices;
  for (absl::string_view part :
       absl::StrSplit(text != nullptr ? reinterpret_cast<const char*>(text) : "", ',',
                      absl::SkipEmpty())) {
    int device = 0;
    if (absl::SimpleAtoi(part, &device)) devices.push_back(device);
  }
  return devices;
}

// The columns CollectJobs reads, in its order.
constexpr char kListColumns[] =
    "sequence, job, state, priority, name, devices, start_time_ms, end_time_ms";

// A job whose blob is damaged, rebuilt from its row's plain columns, so that one
// bad row does not hide every other job from a list (or stop a restart).
v1::Job DamagedJobFromColumns(sqlite3_stmt* stmt, const absl::Status& why) {
  v1::Job job;
  job.set_sequence(sqlite3_column_int64(stmt, 0));
  job.set_id(JobIdForSequence(job.sequence()));
  const int state = sqlite3_column_int(stmt, 2);
  job.set_state(v1::JobState_IsValid(state) ? static_cast<v1::JobState>(state)
                                            : v1::JOB_STATE_UNSPECIFIED);
  job.set_priority(sqlite3_column_int(stmt, 3));
  const unsigned char* name = sqlite3_column_text(stmt, 4);
  job.set_name(name != nullptr ? reinterpret_cast<const char*>(name) : "");
  for (int device : DevicesFromColumn(sqlite3_column_text(stmt, 5))) job.add_devices(device);
  job.set_start_time_ms(sqlite3_column_int64(stmt, 6));
  job.set_end_time_ms(sqlite3_column_int64(stmt, 7));
  job.set_error(absl::StrCat(why.message(), ": its spec and results are lost"));
  job.set_error_code(static_cast<int32_t>(absl::StatusCode::kDataLoss));
  return job;
}

absl::StatusOr<std::vector<v1::Job>> CollectJobs(sqlite3* db, sqlite3_stmt* stmt) {
  std::vector<v1::Job> jobs;
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    absl::StatusOr<v1::Job> job = JobFromColumn(stmt, 1);
    if (job.ok()) {
      jobs.push_back(std::move(*job));
    } else {
      jobs.push_back(DamagedJobFromColumns(stmt, job.status()));
    }
  }
  if (rc != SQLITE_DONE) return SqliteError(db, "reading jobs");
  return jobs;
}

// Adds one job's row to per-device usage: every device it started on ran one
// more job, and one that also ended was busy for (end - start).
void AddUsage(const unsigned char* devices, int64_t start_ms, int64_t end_ms,
              std::map<int, DeviceUsage>* usage) {
  if (start_ms <= 0) return;
  const double ms = end_ms >= start_ms ? static_cast<double>(end_ms - start_ms) : 0.0;
  for (int device : DevicesFromColumn(devices)) {
    DeviceUsage& u = (*usage)[device];
    ++u.jobs_run;
    if (end_ms > 0) u.busy_ms += ms;
  }
}

}  // namespace

std::string JobIdForSequence(uint64_t sequence) { return absl::StrFormat("job-%06d", sequence); }

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& state_dir) {
  if (state_dir.empty()) return absl::InvalidArgumentError("state_dir is empty");
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("state_dir ", state_dir, ": cannot create: ", ec.message()));
  }
  if (!std::filesystem::is_directory(state_dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("state_dir ", state_dir, " is not a directory"));
  }
  const std::string path = (std::filesystem::path(state_dir) / kStoreFileName).string();
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status status = absl::InvalidArgumentError(
        absl::StrCat("state_dir ", state_dir, ": cannot open ", path, ": ",
                     db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
    sqlite3_close(db);
    return status;
  }
  std::unique_ptr<JobStore> store(new JobStore(db, path));
  absl::MutexLock lock(&store->mu_);
  sqlite3_busy_timeout(db, 5000);
  // WAL + FULL: a job is on disk before SubmitJob answers OK.
  for (const char* sql : {"PRAGMA journal_mode=WAL;", "PRAGMA synchronous=FULL;", kSchema}) {
    absl::Status s = store->ExecLocked(sql);
    if (s.code() == absl::StatusCode::kDataLoss) {
      // Starting afresh would drop every job the file holds: the operator decides.
      return absl::DataLossError(absl::StrCat(
          s.message(), "; the job database is damaged: restore it from a backup, or move ", path,
          "* aside to start with an empty job history"));
    }
    if (!s.ok()) return s;
  }

  Statement version(db, "PRAGMA user_version;");
  if (auto s = version.status("reading the schema version"); !s.ok()) return s;
  int user_version = 0;
  if (sqlite3_step(version.get()) == SQLITE_ROW) {
    user_version = sqlite3_column_int(version.get(), 0);
  }
  if (user_version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(path, " has schema version ", user_version,
                                                      ", newer than this overlapd (",
                                                      kSchemaVersion, "); refusing to touch it"));
  }
  if (user_version < kSchemaVersion) {
    if (auto s =
            store->ExecLocked(absl::StrCat("PRAGMA user_version=", kSchemaVersion, ";").c_str());
        !s.ok()) {
      return s;
    }
  }
  return store;
}

JobStore::~JobStore() {
  absl::MutexLock lock(&mu_);
  sqlite3_close(db_);
}

absl::Status JobStore::ExecLocked(const char* sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &error) != SQLITE_OK) {
    absl::Status status = StatusForSqlite(
        db_, absl::StrCat("job store ", path_, ": ", error != nullptr ? error : "unknown error"));
    sqlite3_free(error);
    return status;
  }
  return absl::OkStatus();
}

absl::Status JobStore::Put(const v1::Job& job) {
  std::string blob;
  if (!job.SerializeToString(&blob)) {
    return absl::InternalError(absl::StrCat("job store: cannot serialize ", job.id()));
  }
  const std::string devices = absl::StrJoin(job.devices(), ",");
  absl::MutexLock lock(&mu_);
  Statement stmt(db_,
                 "INSERT OR REPLACE INTO jobs (id, sequence, state, priority, name, devices, "
                 "start_time_ms, end_time_ms, job) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?);");
  if (auto s = stmt.status("preparing insert"); !s.ok()) return s;
  sqlite3_stmt* st = stmt.get();
  sqlite3_bind_text(st, 1, job.id().data(), static_cast<int>(job.id().size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, 2, static_cast<sqlite3_int64>(job.sequence()));
  sqlite3_bind_int(st, 3, job.state());
  sqlite3_bind_int(st, 4, job.priority());
  sqlite3_bind_text(st, 5, job.name().data(), static_cast<int>(job.name().size()),
                    SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 6, devices.data(), static_cast<int>(devices.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, 7, job.start_time_ms());
  sqlite3_bind_int64(st, 8, job.end_time_ms());
  sqlite3_bind_blob(st, 9, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
  if (sqlite3_step(st) != SQLITE_DONE) return SqliteError(db_, absl::StrCat("storing ", job.id()));
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> JobStore::Get(const std::string& id) {
  absl::string_view id_view = id;
  absl::MutexLock lock(&mu_);
  Statement stmt(db_, "SELECT sequence, job FROM jobs WHERE id = ?;");
  if (auto s = stmt.status("preparing get"); !s.ok()) return s;
  sqlite3_bind_text(stmt.get(), 1, id.data(), static_cast<int>(id.size()), SQLITE_TRANSIENT);
  const int rc = sqlite3_step(stmt.get());
  if (rc == SQLITE_ROW) return JobFromColumn(stmt.get(), 1);
  if (rc != SQLITE_DONE) return SqliteError(db_, absl::StrCat("reading ", id));
  uint64_t sequence = 0;
  auto max_pruned = MaxPrunedSequenceLocked();
  if (max_pruned.ok() && absl::ConsumePrefix(&id_view, "job-") &&
      absl::SimpleAtoi(id_view, &sequence) && sequence > 0 && sequence <= *max_pruned) {
    return absl::NotFoundError(
        absl::StrCat("job ", id,
                     " not found: finished jobs past the retention limit (keep_finished_jobs, "
                     "keep_finished_days) are deleted, and it may have been one"));
  }
  return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
}

absl::StatusOr<std::vector<v1::Job>> JobStore::List(v1::JobState state, int limit) {
  std::string sql = absl::StrCat("SELECT ", kListColumns, " FROM jobs");
  if (state != v1::JOB_STATE_UNSPECIFIED) absl::StrAppend(&sql, " WHERE state = ?1");
  absl::StrAppend(&sql, limit > 0 ? " ORDER BY sequence DESC LIMIT ?2;" : " ORDER BY sequence;");
  absl::MutexLock lock(&mu_);
  Statement stmt(db_, sql.c_str());
  if (auto s = stmt.status("preparing list"); !s.ok()) return s;
  if (state != v1::JOB_STATE_UNSPECIFIED) sqlite3_bind_int(stmt.get(), 1, state);
  if (limit > 0) sqlite3_bind_int(stmt.get(), 2, limit);
  return CollectJobs(db_, stmt.get());
}

absl::StatusOr<std::vector<v1::Job>> JobStore::ListByState(v1::JobState state) {
  return List(state, 0);
}

absl::StatusOr<uint64_t> JobStore::MaxSequence() {
  absl::MutexLock lock(&mu_);
  // Pruned jobs keep their ids: numbering goes on past the highest ever stored.
  Statement stmt(db_,
                 "SELECT MAX((SELECT COALESCE(MAX(sequence), 0) FROM jobs), "
                 "(SELECT COALESCE(MAX(value), 0) FROM meta WHERE key = ?));");
  sqlite3_bind_text(stmt.get(), 1, kMaxPrunedKey, -1, SQLITE_STATIC);
  if (auto s = stmt.status("preparing max"); !s.ok()) return s;
  if (sqlite3_step(stmt.get()) != SQLITE_ROW) return SqliteError(db_, "reading max sequence");
  return static_cast<uint64_t>(sqlite3_column_int64(stmt.get(), 0));
}

absl::StatusOr<std::map<v1::JobState, int64_t>> JobStore::CountByState() {
  absl::MutexLock lock(&mu_);
  Statement stmt(db_,
                 "SELECT state, SUM(jobs) FROM (SELECT state, COUNT(*) AS jobs FROM jobs GROUP BY "
                 "state UNION ALL SELECT state, jobs FROM pruned_states) GROUP BY state;");
  if (auto s = stmt.status("preparing count"); !s.ok()) return s;
  std::map<v1::JobState, int64_t> counts;
  int rc;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    counts[static_cast<v1::JobState>(sqlite3_column_int(stmt.get(), 0))] =
        sqlite3_column_int64(stmt.get(), 1);
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, "counting jobs");
  return counts;
}

absl::StatusOr<std::map<int, DeviceUsage>> JobStore::UsageByDevice() {
  absl::MutexLock lock(&mu_);
  std::map<int, DeviceUsage> usage;
  {
    Statement stmt(db_,
                   "SELECT devices, start_time_ms, end_time_ms FROM jobs WHERE start_time_ms > 0;");
    if (auto s = stmt.status("preparing usage"); !s.ok()) return s;
    int rc;
    while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
      AddUsage(sqlite3_column_text(stmt.get(), 0),
               sqlite3_column_int64(stmt.get(), 1), sqlite3_column_int64(stmt.get(), 2), &usage);
    }
    if (rc != SQLITE_DONE) return SqliteError(db_, "reading device usage");
  }
  Statement pruned(db_, "SELECT device, busy_ms, jobs_run FROM pruned_devices;");
  if (auto s = pruned.status("preparing pruned usage"); !s.ok()) return s;
  int rc;
  while ((rc = sqlite3_step(pruned.get())) == SQLITE_ROW) {
    DeviceUsage& u = usage[sqlite3_column_int(pruned.get(), 0)];
    u.busy_ms += sqlite3_column_double(pruned.get(), 1);
    u.jobs_run += sqlite3_column_int64(pruned.get(), 2);
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, "reading pruned device usage");
  return usage;
}

absl::StatusOr<uint64_t> JobStore::MaxPrunedSequenceLocked() {
  Statement stmt(db_, "SELECT value FROM meta WHERE key = ?;");
  if (auto s = stmt.status("preparing meta"); !s.ok()) return s;
  sqlite3_bind_text(stmt.get(), 1, kMaxPrunedKey, -1, SQLITE_STATIC);
  const int rc = sqlite3_step(stmt.get());
  if (rc == SQLITE_DONE) return 0;
  if (rc != SQLITE_ROW) return SqliteError(db_, "reading meta");
  return static_cast<uint64_t>(sqlite3_column_int64(stmt.get(), 0));
}

absl::StatusOr<int64_t> JobStore::Prune(const RetentionPolicy& policy, int64_t now_ms) {
  if (policy.keep_jobs <= 0 && policy.keep_ms <= 0) return 0;
  // A finished job goes when it is not among the keep_jobs that ended last, or
  // when it ended before now - keep_ms. (By end time, so that a job that has
  // just ended is never the one to go.)
  std::string where = absl::StrCat("state IN ", FinalStatesSql(), " AND (0");
  if (policy.keep_jobs > 0) {
    absl::StrAppend(&where, " OR sequence NOT IN (SELECT sequence FROM jobs WHERE state IN ",
                    FinalStatesSql(), " ORDER BY end_time_ms DESC, sequence DESC LIMIT ",
                    policy.keep_jobs, ")");
  }
  if (policy.keep_ms > 0) {
    absl::StrAppend(&where, " OR end_time_ms < ", now_ms - policy.keep_ms);
  }
  absl::StrAppend(&where, ")");

  absl::MutexLock lock(&mu_);
  // One transaction: the rows chosen are the rows deleted, and the totals move
  // with them, or nothing changes.
  if (auto s = ExecLocked("BEGIN IMMEDIATE;"); !s.ok()) return s;
  absl::StatusOr<int64_t> pruned = PruneLocked(where);
  if (!pruned.ok()) {
    ExecLocked("ROLLBACK;").IgnoreError();
    return pruned.status();
  }
  if (auto s = ExecLocked("COMMIT;"); !s.ok()) return s;
  return pruned;
}

absl::StatusOr<int64_t> JobStore::PruneLocked(const std::string& where) {
  std::map<int, int64_t> by_state;
  std::map<int, DeviceUsage> usage;
  uint64_t max_sequence = 0;
  int64_t count = 0;
  {
    const std::string sql = absl::StrCat(
        "SELECT sequence, state, devices, start_time_ms, end_time_ms FROM jobs WHERE ", where, ";");
    Statement stmt(db_, sql.c_str());
    if (auto s = stmt.status("preparing prune"); !s.ok()) return s;
    int rc;
    while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
      max_sequence =
          std::max(max_sequence, static_cast<uint64_t>(sqlite3_column_int64(stmt.get(), 0)));
      ++by_state[sqlite3_column_int(stmt.get(), 1)];
      AddUsage(sqlite3_column_text(stmt.get(), 2),
               sqlite3_column_int64(stmt.get(), 3), sqlite3_column_int64(stmt.get(), 4), &usage);
      ++count;
    }
    if (rc != SQLITE_DONE) return SqliteError(db_, "choosing jobs to prune");
  }
  if (count == 0) return 0;
  for (const auto& [state, jobs] : by_state) {
    Statement up(db_,
                 "INSERT INTO pruned_states (state, jobs) VALUES (?1, ?2) "
                 "ON CONFLICT(state) DO UPDATE SET jobs = jobs + ?2;");
    if (auto s = up.status("preparing pruned states"); !s.ok()) return s;
    sqlite3_bind_int(up.get(), 1, state);
    sqlite3_bind_int64(up.get(), 2, jobs);
    if (sqlite3_step(up.get()) != SQLITE_DONE) return SqliteError(db_, "storing pruned states");
  }
  for (const auto& [device, u] : usage) {
    Statement up(db_,
                 "INSERT INTO pruned_devices (device, busy_ms, jobs_run) VALUES (?1, ?2, ?3) "
                 "ON CONFLICT(device) DO UPDATE SET busy_ms = busy_ms + ?2, "
                 "jobs_run = jobs_run + ?3;");
    if (auto s = up.status("preparing pruned devices"); !s.ok()) return s;
    sqlite3_bind_int(up.get(), 1, device);
    sqlite3_bind_double(up.get(), 2, u.busy_ms);
    sqlite3_bind_int64(up.get(), 3, u.jobs_run);
    if (sqlite3_step(up.get()) != SQLITE_DONE) return SqliteError(db_, "storing pruned devices");
  }
  Statement meta(db_,
                 "INSERT INTO meta (key, value) VALUES (?1, ?2) "
                 "ON CONFLICT(key) DO UPDATE SET value = MAX(value, ?2);");
  if (auto s = meta.status("preparing meta"); !s.ok()) return s;
  sqlite3_bind_text(meta.get(), 1, kMaxPrunedKey, -1, SQLITE_STATIC);
  sqlite3_bind_int64(meta.get(), 2, static_cast<sqlite3_int64>(max_sequence));
  if (sqlite3_step(meta.get()) != SQLITE_DONE) return SqliteError(db_, "storing meta");
  if (auto s = ExecLocked(absl::StrCat("DELETE FROM jobs WHERE ", where, ";").c_str()); !s.ok()) {
    return s;
  }
  return count;
}

}  // namespace overlap::jobs
