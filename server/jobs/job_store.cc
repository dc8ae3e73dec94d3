#include "server/jobs/job_store.h"

#include <sqlite3.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace overlap::jobs {
namespace {

constexpr int kSchemaVersion = 1;

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
)sql";

absl::Status SqliteError(sqlite3* db, absl::string_view what) {
  return absl::InternalError(absl::StrCat("job store: ", what, ": ", sqlite3_errmsg(db)));
}

// A prepared statement, finalized on destruction.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  absl::Status status(absl::string_view what) const {
    return rc_ == SQLITE_OK ? absl::OkStatus() : SqliteError(db_, what);
  }
  sqlite3_stmt* get() { return stmt_; }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_OK;
};

absl::StatusOr<v1::Job> JobFromColumn(sqlite3_stmt* stmt, int column) {
  const void* blob = sqlite3_column_blob(stmt, column);
  const int bytes = sqlite3_column_bytes(stmt, column);
  v1::Job job;
  if (!job.ParseFromArray(blob, bytes)) {
    return absl::DataLossError(
        absl::StrCat("job store: row ", sqlite3_column_int64(stmt, 0), " holds an unreadable job"));
  }
  return job;
}

absl::StatusOr<std::vector<v1::Job>> CollectJobs(sqlite3* db, sqlite3_stmt* stmt) {
  std::vector<v1::Job> jobs;
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    auto job = JobFromColumn(stmt, 1);
    if (!job.ok()) return job.status();
    jobs.push_back(std::move(*job));
  }
  if (rc != SQLITE_DONE) return SqliteError(db, "reading jobs");
  return jobs;
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
  if (auto s = store->ExecLocked("PRAGMA journal_mode=WAL;"); !s.ok()) return s;
  if (auto s = store->ExecLocked("PRAGMA synchronous=FULL;"); !s.ok()) return s;
  if (auto s = store->ExecLocked(kSchema); !s.ok()) return s;

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
    absl::Status status = absl::InternalError(
        absl::StrCat("job store ", path_, ": ", error != nullptr ? error : "unknown error"));
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
  absl::MutexLock lock(&mu_);
  Statement stmt(db_, "SELECT sequence, job FROM jobs WHERE id = ?;");
  if (auto s = stmt.status("preparing get"); !s.ok()) return s;
  sqlite3_bind_text(stmt.get(), 1, id.data(), static_cast<int>(id.size()), SQLITE_TRANSIENT);
  const int rc = sqlite3_step(stmt.get());
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
  if (rc != SQLITE_ROW) return SqliteError(db_, absl::StrCat("reading ", id));
  return JobFromColumn(stmt.get(), 1);
}

absl::StatusOr<std::vector<v1::Job>> JobStore::List(v1::JobState state, int limit) {
  std::string sql = "SELECT sequence, job FROM jobs";
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
  Statement stmt(db_, "SELECT COALESCE(MAX(sequence), 0) FROM jobs;");
  if (auto s = stmt.status("preparing max"); !s.ok()) return s;
  if (sqlite3_step(stmt.get()) != SQLITE_ROW) return SqliteError(db_, "reading max sequence");
  return static_cast<uint64_t>(sqlite3_column_int64(stmt.get(), 0));
}

absl::StatusOr<std::map<v1::JobState, int64_t>> JobStore::CountByState() {
  absl::MutexLock lock(&mu_);
  Statement stmt(db_, "SELECT state, COUNT(*) FROM jobs GROUP BY state;");
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
  Statement stmt(db_,
                 "SELECT devices, start_time_ms, end_time_ms FROM jobs WHERE start_time_ms > 0;");
  if (auto s = stmt.status("preparing usage"); !s.ok()) return s;
  std::map<int, DeviceUsage> usage;
  int rc;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    const char* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt.get(), 0));
    const int64_t start = sqlite3_column_int64(stmt.get(), 1);
    const int64_t end = sqlite3_column_int64(stmt.get(), 2);
    const double ms = end >= start ? static_cast<double>(end - start) : 0.0;
    for (absl::string_view part :
         absl::StrSplit(text != nullptr ? text : "", ',', absl::SkipEmpty())) {
      int device = 0;
      if (!absl::SimpleAtoi(part, &device)) continue;
      DeviceUsage& u = usage[device];
      ++u.jobs_run;
      if (end > 0) u.busy_ms += ms;
    }
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, "reading device usage");
  return usage;
}

}  // namespace overlap::jobs
