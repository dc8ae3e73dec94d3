#include "server/jobs/job_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/logging.h"
#include "common/sqlite_statement.h"
#include "common/status_macros.h"
#include "common/text.h"
#include "server/jobs/job_row.h"
#include "server/wire/job_wire.h"
#include "server/wire/report_wire.h"

namespace overlap::jobs {
namespace {

// 2: pruned_states, pruned_devices and meta keep what retention deleted.
// 3: summaries (what a list reads), op_results (a running job's finished ops)
//    and an index by end time (retention).
// 4: jobs.counted, 0 for a part of a job this node coordinates (that job
//    stands for it in the counts by state).
constexpr int kSchemaVersion = 4;

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
  job BLOB NOT NULL,
  counted INTEGER NOT NULL DEFAULT 1
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
CREATE TABLE IF NOT EXISTS summaries (
  sequence INTEGER PRIMARY KEY,
  summary BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS op_results (
  sequence INTEGER NOT NULL,
  op_index INTEGER NOT NULL,
  result BLOB NOT NULL,
  PRIMARY KEY (sequence, op_index)
);
CREATE INDEX IF NOT EXISTS jobs_by_end ON jobs(end_time_ms, sequence);
)sql";

constexpr char kMaxPrunedKey[] = "max_pruned_sequence";

// The states a job never leaves (job_record.h, IsFinal), as an SQL list.
std::string FinalStatesSql() {
  return absl::StrCat("(", v1::SUCCEEDED, ", ", v1::FAILED, ", ", v1::CANCELLED, ", ", v1::ABORTED,
                      ")");
}

absl::Status StoreError(sqlite3* db, absl::string_view what) {
  return SqliteError(db, absl::StrCat("job store: ", what));
}

// A prepared statement whose failure to prepare reads as a job store error.
class Statement : public SqliteStatement {
 public:
  Statement(sqlite3* db, const char* sql) : SqliteStatement(db, sql), db_(db) {}

  absl::Status status(absl::string_view what) const {
    return prepared() ? absl::OkStatus() : StoreError(db_, what);
  }

 private:
  sqlite3* db_;
};

// A blob column's bytes (empty for NULL), valid until the statement moves on.
absl::string_view BlobColumn(sqlite3_stmt* stmt, int column) {
  const void* blob = sqlite3_column_blob(stmt, column);
  const int bytes = sqlite3_column_bytes(stmt, column);
  if (blob == nullptr || bytes <= 0) return {};
  return absl::string_view(static_cast<const char*>(blob), static_cast<size_t>(bytes));
}

// The columns a row's blob repeats, from a statement whose columns 0 and 2
// are its sequence and state (kListColumns' order).
JobRowColumns RowColumns(sqlite3_stmt* stmt) {
  return JobRowColumns{static_cast<uint64_t>(sqlite3_column_int64(stmt, 0)),
                       sqlite3_column_int(stmt, 2), -1};
}

// RowColumns, and the length of the row's job blob from column 8 (ListSummaries).
JobRowColumns SummaryRowColumns(sqlite3_stmt* stmt) {
  JobRowColumns row = RowColumns(stmt);
  if (sqlite3_column_type(stmt, 8) != SQLITE_NULL) row.job_bytes = sqlite3_column_int64(stmt, 8);
  return row;
}

// The job in column 1 of a statement in kListColumns' order (job_row.h).
absl::StatusOr<v1::Job> JobFromRow(sqlite3_stmt* stmt) {
  return DecodeJobRow(BlobColumn(stmt, 1), RowColumns(stmt));
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
    absl::StatusOr<v1::Job> job = JobFromRow(stmt);
    if (job.ok()) {
      jobs.push_back(std::move(*job));
    } else {
      jobs.push_back(DamagedJobFromColumns(stmt, job.status()));
    }
  }
  if (rc != SQLITE_DONE) return StoreError(db, "reading jobs");
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


// Reads the highest-id file: 0 when there is none.
absl::StatusOr<uint64_t> ReadHighestId(const std::string& path) {
  std::ifstream in(path);
  if (!in) return 0;
  std::string text;
  std::getline(in, text);
  uint64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value)) {
    return absl::DataLossError(absl::StrCat(
        path, " is damaged (it should hold the highest job id given out): restore it, or remove "
              "it if the job database is known to be whole"));
  }
  return value;
}

// Replaces the file in one rename, so that it never holds half a number. No
// fsync: it guards against a database that lost jobs, and a crash of the
// daemon leaves what it wrote in the page cache.
absl::Status WriteHighestId(const std::string& path, uint64_t value) {
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << value << "\n";
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", temp));
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot rename ", temp, ": ", ec.message()));
  return absl::OkStatus();
}

// Folds op rows (op_index, JobResult with one op) read by `stmt` into `job`.
absl::Status FoldOpRows(sqlite3* db, sqlite3_stmt* stmt, v1::Job* job) {
  v1::JobResult merged;
  bool any = false;
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    ASSIGN_OR_RETURN(v1::JobResult row, DecodeOpResultRow(BlobColumn(stmt, 0), job->sequence()));
    google::protobuf::RepeatedPtrField<v1::OpResult> ops;
    ops.Swap(merged.mutable_ops());
    for (v1::OpResult& op : *row.mutable_ops()) *ops.Add() = std::move(op);
    row.clear_ops();
    merged = std::move(row);  // the newest row's other fields (totals) win
    merged.mutable_ops()->Swap(&ops);
    any = true;
  }
  if (rc != SQLITE_DONE) return StoreError(db, "reading op results");
  if (any && merged.ops_size() > job->result().ops_size()) *job->mutable_result() = std::move(merged);
  return absl::OkStatus();
}

bool IsFinal(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED ||
         state == v1::ABORTED;
}

// Folds the op rows of a job that is not final into its result.
absl::Status AddOpRows(sqlite3* db, v1::Job* job) {
  if (!IsFinal(job->state())) {
    Statement stmt(db, "SELECT result FROM op_results WHERE sequence = ? ORDER BY op_index;");
    RETURN_IF_ERROR(stmt.status("preparing op results"));
    sqlite3_bind_int64(stmt.get(), 1, static_cast<sqlite3_int64>(job->sequence()));
    RETURN_IF_ERROR(FoldOpRows(db, stmt.get(), job));
  }
  job->set_ops_finished(job->result().ops_size());
  return absl::OkStatus();
}

// What a list shows of a stored job (JobSummary).
v1::Job SummaryOf(const v1::Job& job) {
  v1::Job summary;
  summary.set_id(job.id());
  summary.set_name(job.name());
  summary.set_state(job.state());
  summary.set_priority(job.priority());
  summary.set_priority_class(job.priority_class());
  *summary.mutable_devices() = job.devices();
  summary.set_error(job.error());
  summary.set_submit_time_ms(job.submit_time_ms());
  summary.set_start_time_ms(job.start_time_ms());
  summary.set_end_time_ms(job.end_time_ms());
  *summary.mutable_progress() = job.progress();
  summary.set_sequence(job.sequence());
  summary.set_error_code(job.error_code());
  summary.set_ops_finished(job.result().ops_size());
  summary.set_owner(job.owner());
  summary.set_owner_name(job.owner_name());
  *summary.mutable_nodes() = job.nodes();
  summary.set_coordinator(job.coordinator());
  summary.set_global_job_id(job.global_job_id());
  summary.set_node_index(job.node_index());
  const v1::JobResult& result = job.result();
  v1::JobResult* totals = summary.mutable_result();
  totals->set_backend(result.backend());
  totals->set_total_step_ms(result.total_step_ms());
  totals->set_total_exposed_comm_ms(result.total_exposed_comm_ms());
  if (result.has_layer_step()) *totals->mutable_layer_step() = result.layer_step();
  totals->set_layer_exposed_comm_ms(result.layer_exposed_comm_ms());
  totals->set_ranks_per_gpu(result.ranks_per_gpu());
  return summary;
}

// Inside Put's transaction; *finished_delta is how it changes the finished rows.
absl::Status PutRow(sqlite3* db, const v1::Job& job, int* finished_delta);

std::vector<JobRecord> RecordsOf(const std::vector<v1::Job>& jobs) {
  std::vector<JobRecord> records;
  records.reserve(jobs.size());
  for (const v1::Job& job : jobs) records.push_back(wire::FromProto(job));
  return records;
}

}  // namespace

std::string JobIdForSequence(uint64_t sequence) { return absl::StrFormat("job-%06d", sequence); }

JobRecord JobSummary(const JobRecord& job) {
  return wire::FromProto(SummaryOf(wire::ToProto(job)));
}

JobStore::JobStore(SqliteDb writer, SqliteDb reader, std::string path,
                   std::string highest_id_path, uint64_t highest_id)
    : writer_(std::move(writer)),
      highest_id_(highest_id),
      reader_(std::move(reader)),
      path_(std::move(path)),
      highest_id_path_(std::move(highest_id_path)) {}

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
  const std::string highest_id_path =
      (std::filesystem::path(state_dir) / kHighestIdFileName).string();
  const bool fresh_file = !std::filesystem::exists(path, ec);
  if (!fresh_file && !std::filesystem::is_regular_file(path, ec)) {
    // /dev/null or a directory in its place opens, then fails at every write:
    // refused at start, as a setting someone must fix (exit 2), not retried.
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is not a regular file (", std::filesystem::is_symlink(path, ec) ? "a symlink to " : "",
        std::filesystem::is_character_file(path, ec) ? "a device"
        : std::filesystem::is_directory(path, ec)    ? "a directory"
                                                     : "not a file",
        "): the job database must be a file in state_dir; move it aside"));
  }
  ASSIGN_OR_RETURN(const uint64_t highest_id, ReadHighestId(highest_id_path));
  const auto damaged = [&path](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(
        absl::StartsWith(what, path) ? "" : absl::StrCat(path, ": "), what, "; the job database is damaged: restore it from a backup, or move ",
        path, "* aside to start with an empty job history"));
  };

  absl::StatusOr<SqliteDb> writer = SqliteDb::Open(path);
  if (!writer.ok()) {
    if (writer.status().code() == absl::StatusCode::kDataLoss) {
      return damaged(writer.status().message());
    }
    return absl::Status(writer.status().code(),
                        absl::StrCat("state_dir ", state_dir, ": ", writer.status().message()));
  }
  std::unique_ptr<JobStore> store(new JobStore(std::move(*writer), SqliteDb(), path,
                                               highest_id_path, highest_id));
  absl::MutexLock lock(&store->write_mu_);
  // Page damage would otherwise start a "healthy" daemon whose store answers
  // DATA_LOSS; refused here, before anything is served.
  {
    Statement check(store->writer_.get(), "PRAGMA quick_check;");
    if (!check.prepared()) {
      const absl::Status s = StoreError(store->writer_.get(), "checking the database");
      return s.code() == absl::StatusCode::kDataLoss ? damaged(s.message()) : s;
    }
    const int rc = sqlite3_step(check.get());
    const unsigned char* verdict = rc == SQLITE_ROW ? sqlite3_column_text(check.get(), 0) : nullptr;
    if (rc != SQLITE_ROW || verdict == nullptr ||
        std::string(reinterpret_cast<const char*>(verdict)) != "ok") {
      return damaged(verdict != nullptr
                         ? absl::StrCat("quick_check found ",
                                        Excerpt(reinterpret_cast<const char*>(verdict)))
                         : std::string(sqlite3_errmsg(store->writer_.get())));
    }
  }
  if (absl::Status s = store->SetUpSchema(); !s.ok()) {
    return s.code() == absl::StatusCode::kDataLoss ? damaged(s.message()) : s;
  }
  RETURN_IF_ERROR(store->CheckNothingLost(fresh_file));
  RETURN_IF_ERROR(store->CountFinishedRows());
  ASSIGN_OR_RETURN(SqliteDb reader, SqliteDb::Open(path, SqliteDb::Mode::kReadOnly));
  absl::MutexLock read_lock(&store->read_mu_);
  store->reader_ = std::move(reader);
  return store;
}

absl::Status JobStore::SetUpSchema() {
  sqlite3* db = writer_.get();
  int user_version = 0;
  {
    Statement version(db, "PRAGMA user_version;");
    RETURN_IF_ERROR(version.status("reading the schema version"));
    if (sqlite3_step(version.get()) == SQLITE_ROW) {
      user_version = sqlite3_column_int(version.get(), 0);
    }
  }
  if (user_version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(path_, " has schema version ", user_version,
                                                      ", newer than this overlapd (",
                                                      kSchemaVersion, "); refusing to touch it"));
  }
  if (absl::Status s = writer_.Exec(kSchema); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("job store ", path_, ": ", s.message()));
  }
  RETURN_IF_ERROR(AddCountedColumn());
  if (user_version < kSchemaVersion) {
    if (absl::Status s = writer_.Exec(absl::StrCat("PRAGMA user_version=", kSchemaVersion, ";"));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// A database from before schema 4 has no jobs.counted: every job it holds
// counted (ALTER TABLE fills the default into the rows it has).
absl::Status JobStore::AddCountedColumn() {
  Statement columns(writer_.get(),
                    "SELECT COUNT(*) FROM pragma_table_info('jobs') WHERE name = 'counted';");
  RETURN_IF_ERROR(columns.status("reading the jobs table's columns"));
  if (sqlite3_step(columns.get()) != SQLITE_ROW) {
    return StoreError(writer_.get(), "reading the jobs table's columns");
  }
  if (sqlite3_column_int(columns.get(), 0) > 0) return absl::OkStatus();
  return writer_.Exec("ALTER TABLE jobs ADD COLUMN counted INTEGER NOT NULL DEFAULT 1;");
}

absl::Status JobStore::CheckNothingLost(bool fresh_file) {
  ASSIGN_OR_RETURN(const uint64_t max_pruned, MaxPrunedSequence(writer_.get()));
  Statement stmt(writer_.get(), "SELECT COALESCE(MAX(sequence), 0) FROM jobs;");
  RETURN_IF_ERROR(stmt.status("reading max sequence"));
  if (sqlite3_step(stmt.get()) != SQLITE_ROW) return StoreError(writer_.get(), "max sequence");
  const uint64_t held =
      std::max(static_cast<uint64_t>(sqlite3_column_int64(stmt.get(), 0)), max_pruned);
  if (highest_id_ <= held) {
    if (highest_id_ < held) NoteHighestId(held);  // a database from before the file
    return absl::OkStatus();
  }
  if (fresh_file) {
    // Moved aside on purpose (what the refusal below asks for): a new history,
    // its ids after every one given out.
    GetLogger("store")->warn("{} is new: job ids continue after {}", path_,
                             JobIdForSequence(highest_id_));
    return absl::OkStatus();
  }
  return absl::DataLossError(absl::StrCat(
      path_, " holds jobs up to ", held == 0 ? "none" : JobIdForSequence(held), ", but ",
      JobIdForSequence(highest_id_), " was given out (", highest_id_path_,
      "): the database lost jobs (truncated, replaced, or its write-ahead log damaged). "
      "Restore it from a backup, or move ",
      path_, "* aside to start with an empty job history (ids continue after ",
      JobIdForSequence(highest_id_), ")"));
}

absl::Status JobStore::CountFinishedRows() {
  Statement stmt(writer_.get(),
                 absl::StrCat("SELECT COUNT(*) FROM jobs WHERE state IN ", FinalStatesSql(), ";")
                     .c_str());
  RETURN_IF_ERROR(stmt.status("counting finished jobs"));
  if (sqlite3_step(stmt.get()) != SQLITE_ROW) return StoreError(writer_.get(), "counting jobs");
  finished_rows_.store(sqlite3_column_int64(stmt.get(), 0));
  return absl::OkStatus();
}

void JobStore::NoteHighestId(uint64_t sequence) {
  if (sequence <= highest_id_) return;
  if (absl::Status s = WriteHighestId(highest_id_path_, sequence); !s.ok()) {
    GetLogger("store")->warn("{}", std::string(s.message()));
    return;
  }
  highest_id_ = sequence;
}

JobStore::~JobStore() = default;

absl::Status JobStore::Put(const JobRecord& record) {
  const v1::Job job = wire::ToProto(record);
  absl::MutexLock lock(&write_mu_);
  RETURN_IF_ERROR(writer_.Exec("BEGIN IMMEDIATE;"));
  int finished_delta = 0;
  absl::Status status = PutRow(writer_.get(), job, &finished_delta);
  if (status.ok()) status = writer_.Exec("COMMIT;");
  if (!status.ok()) {
    writer_.Exec("ROLLBACK;").IgnoreError();
    return status;
  }
  finished_rows_.fetch_add(finished_delta);
  NoteHighestId(job.sequence());
  return absl::OkStatus();
}

namespace {

absl::Status PutRow(sqlite3* db, const v1::Job& job, int* finished_delta) {
  {
    Statement before(db, "SELECT state FROM jobs WHERE sequence = ?;");
    RETURN_IF_ERROR(before.status("preparing insert"));
    sqlite3_bind_int64(before.get(), 1, static_cast<sqlite3_int64>(job.sequence()));
    const bool was_final =
        sqlite3_step(before.get()) == SQLITE_ROW &&
        IsFinal(static_cast<v1::JobState>(sqlite3_column_int(before.get(), 0)));
    *finished_delta = (IsFinal(job.state()) ? 1 : 0) - (was_final ? 1 : 0);
  }
  std::string blob, summary;
  if (!job.SerializeToString(&blob) || !SummaryOf(job).SerializeToString(&summary)) {
    return absl::InternalError(absl::StrCat("job store: cannot serialize ", job.id()));
  }
  const std::string devices = absl::StrJoin(job.devices(), ",");
  {
    Statement stmt(
        db,
        "INSERT OR REPLACE INTO jobs (id, sequence, state, priority, name, devices, "
        "start_time_ms, end_time_ms, job, counted) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?);");
    RETURN_IF_ERROR(stmt.status("preparing insert"));
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
    sqlite3_bind_int(st, 10, job.counted_as_coordinated() ? 0 : 1);
    if (sqlite3_step(st) != SQLITE_DONE) return StoreError(db, absl::StrCat("storing ", job.id()));
  }
  {
    Statement stmt(db, "INSERT OR REPLACE INTO summaries (sequence, summary) VALUES (?, ?);");
    RETURN_IF_ERROR(stmt.status("preparing summary"));
    sqlite3_bind_int64(stmt.get(), 1, static_cast<sqlite3_int64>(job.sequence()));
    sqlite3_bind_blob(stmt.get(), 2, summary.data(), static_cast<int>(summary.size()),
                      SQLITE_TRANSIENT);
    if (sqlite3_step(stmt.get()) != SQLITE_DONE) {
      return StoreError(db, absl::StrCat("storing the summary of ", job.id()));
    }
  }
  if (IsFinal(job.state())) {
    Statement stmt(db, "DELETE FROM op_results WHERE sequence = ?;");
    RETURN_IF_ERROR(stmt.status("preparing op cleanup"));
    sqlite3_bind_int64(stmt.get(), 1, static_cast<sqlite3_int64>(job.sequence()));
    if (sqlite3_step(stmt.get()) != SQLITE_DONE) {
      return StoreError(db, absl::StrCat("dropping the op rows of ", job.id()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status JobStore::PutOpResult(uint64_t sequence, int index, const runner::JobReport& header,
                                   const runner::OpReport& op) {
  v1::JobResult row = wire::ToProto(header);
  row.clear_ops();
  *row.add_ops() = wire::ToProto(op);
  std::string blob;
  if (!row.SerializeToString(&blob)) {
    return absl::InternalError(absl::StrCat("job store: cannot serialize an op result"));
  }
  absl::MutexLock lock(&write_mu_);
  sqlite3* db = writer_.get();
  Statement stmt(db,
                 "INSERT OR REPLACE INTO op_results (sequence, op_index, result) VALUES (?, ?, ?);");
  RETURN_IF_ERROR(stmt.status("preparing op result"));
  sqlite3_bind_int64(stmt.get(), 1, static_cast<sqlite3_int64>(sequence));
  sqlite3_bind_int(stmt.get(), 2, index);
  sqlite3_bind_blob(stmt.get(), 3, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
  if (sqlite3_step(stmt.get()) != SQLITE_DONE) {
    return StoreError(db, absl::StrCat("storing an op result of ", JobIdForSequence(sequence)));
  }
  return absl::OkStatus();
}

absl::StatusOr<JobRecord> JobStore::Get(const std::string& id) {
  absl::MutexLock lock(&read_mu_);
  sqlite3* db = reader_.get();
  Statement stmt(db, "SELECT sequence, job, state FROM jobs WHERE id = ?;");
  RETURN_IF_ERROR(stmt.status("preparing get"));
  sqlite3_bind_text(stmt.get(), 1, id.data(), static_cast<int>(id.size()), SQLITE_TRANSIENT);
  const int rc = sqlite3_step(stmt.get());
  if (rc == SQLITE_ROW) {
    ASSIGN_OR_RETURN(v1::Job job, JobFromRow(stmt.get()));
    RETURN_IF_ERROR(AddOpRows(db, &job));
    return wire::FromProto(job);
  }
  if (rc != SQLITE_DONE) return StoreError(db, absl::StrCat("reading ", Excerpt(id)));
  uint64_t sequence = 0;
  absl::string_view id_view = id;
  auto max_pruned = MaxPrunedSequence(db);
  if (max_pruned.ok() && absl::ConsumePrefix(&id_view, "job-") &&
      absl::SimpleAtoi(id_view, &sequence) && sequence > 0 && sequence <= *max_pruned) {
    return absl::NotFoundError(
        absl::StrCat("job ", id,
                     " not found: finished jobs past the retention limit (keep_finished_jobs, "
                     "keep_finished_days) are deleted, and it may have been one"));
  }
  return absl::NotFoundError(absl::StrCat("job ", Excerpt(id), " not found"));
}

absl::StatusOr<std::vector<JobRecord>> JobStore::List(std::optional<JobState> state, int limit) {
  absl::MutexLock lock(&read_mu_);
  return ListLocked(state, limit);
}

absl::StatusOr<std::vector<JobRecord>> JobStore::ListLocked(std::optional<JobState> state,
                                                            int limit) {
  std::string sql = absl::StrCat("SELECT ", kListColumns, " FROM jobs");
  if (state) absl::StrAppend(&sql, " WHERE state = ?1");
  absl::StrAppend(&sql, limit > 0 ? " ORDER BY sequence DESC LIMIT ?2;" : " ORDER BY sequence;");
  Statement stmt(reader_.get(), sql.c_str());
  RETURN_IF_ERROR(stmt.status("preparing list"));
  if (state) sqlite3_bind_int(stmt.get(), 1, wire::ToProto(*state));
  if (limit > 0) sqlite3_bind_int(stmt.get(), 2, limit);
  ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, CollectJobs(reader_.get(), stmt.get()));
  for (v1::Job& job : jobs) {
    RETURN_IF_ERROR(AddOpRows(reader_.get(), &job));
  }
  return RecordsOf(jobs);
}

absl::StatusOr<std::vector<JobRecord>> JobStore::ListByState(JobState state) {
  return List(state, 0);
}

absl::StatusOr<JobPage> JobStore::ListSummaries(std::optional<JobState> state, int limit,
                                                uint64_t before) {
  limit = std::max(limit, 1);
  std::string sql =
      "SELECT j.sequence, s.summary, j.state, j.priority, j.name, j.devices, j.start_time_ms, "
      "j.end_time_ms, length(j.job) FROM jobs j LEFT JOIN summaries s ON s.sequence = j.sequence "
      "WHERE 1";
  if (state) absl::StrAppend(&sql, " AND j.state = ?1");
  if (before > 0) absl::StrAppend(&sql, " AND j.sequence < ?2");
  // One more than asked: whether another page follows.
  absl::StrAppend(&sql, " ORDER BY j.sequence DESC LIMIT ?3;");
  absl::MutexLock lock(&read_mu_);
  sqlite3* db = reader_.get();
  Statement stmt(db, sql.c_str());
  RETURN_IF_ERROR(stmt.status("preparing list"));
  if (state) sqlite3_bind_int(stmt.get(), 1, wire::ToProto(*state));
  if (before > 0) sqlite3_bind_int64(stmt.get(), 2, static_cast<sqlite3_int64>(before));
  sqlite3_bind_int(stmt.get(), 3, limit + 1);
  std::vector<v1::Job> summaries;
  uint64_t next_before = 0;
  std::vector<uint64_t> without_summary;  // rows stored before summaries existed
  int rc;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    if (static_cast<int>(summaries.size()) == limit) {
      next_before = summaries.back().sequence();
      break;
    }
    const uint64_t sequence = sqlite3_column_int64(stmt.get(), 0);
    v1::Job summary;
    if (sqlite3_column_type(stmt.get(), 1) == SQLITE_NULL) {
      summary.set_sequence(sequence);
      without_summary.push_back(sequence);
    } else if (absl::StatusOr<v1::Job> decoded =
                   DecodeSummaryRow(BlobColumn(stmt.get(), 1), SummaryRowColumns(stmt.get()));
               decoded.ok()) {
      summary = std::move(*decoded);
    } else {
      summary = DamagedJobFromColumns(stmt.get(), decoded.status());
    }
    summaries.push_back(std::move(summary));
  }
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) return StoreError(db, "listing jobs");
  for (v1::Job& job : summaries) {
    if (std::find(without_summary.begin(), without_summary.end(), job.sequence()) ==
        without_summary.end()) {
      continue;
    }
    Statement one(db, absl::StrCat("SELECT ", kListColumns, " FROM jobs WHERE sequence = ?;").c_str());
    RETURN_IF_ERROR(one.status("preparing list"));
    sqlite3_bind_int64(one.get(), 1, static_cast<sqlite3_int64>(job.sequence()));
    ASSIGN_OR_RETURN(const std::vector<v1::Job> full, CollectJobs(db, one.get()));
    if (!full.empty()) job = SummaryOf(full.front());
  }
  return JobPage{RecordsOf(summaries), next_before};
}

absl::StatusOr<uint64_t> JobStore::MaxSequence() {
  uint64_t highest_id = 0;
  {
    absl::MutexLock lock(&write_mu_);
    highest_id = highest_id_;
  }
  absl::MutexLock lock(&read_mu_);
  // Pruned jobs keep their ids: numbering goes on past the highest ever stored.
  Statement stmt(reader_.get(),
                 "SELECT MAX((SELECT COALESCE(MAX(sequence), 0) FROM jobs), "
                 "(SELECT COALESCE(MAX(value), 0) FROM meta WHERE key = ?));");
  RETURN_IF_ERROR(stmt.status("preparing max"));
  sqlite3_bind_text(stmt.get(), 1, kMaxPrunedKey, -1, SQLITE_STATIC);
  if (sqlite3_step(stmt.get()) != SQLITE_ROW) {
    return StoreError(reader_.get(), "reading max sequence");
  }
  return std::max(highest_id, static_cast<uint64_t>(sqlite3_column_int64(stmt.get(), 0)));
}

absl::StatusOr<std::map<JobState, int64_t>> JobStore::CountByState() {
  absl::MutexLock lock(&read_mu_);
  Statement stmt(reader_.get(),
                 "SELECT state, SUM(jobs) FROM (SELECT state, COUNT(*) AS jobs FROM jobs WHERE "
                 "counted = 1 GROUP BY state UNION ALL SELECT state, jobs FROM pruned_states) "
                 "GROUP BY state;");
  RETURN_IF_ERROR(stmt.status("preparing count"));
  std::map<JobState, int64_t> counts;
  int rc;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    const int state = sqlite3_column_int(stmt.get(), 0);
    if (state == v1::JOB_STATE_UNSPECIFIED || !v1::JobState_IsValid(state)) continue;
    counts[wire::FromProto(static_cast<v1::JobState>(state))] = sqlite3_column_int64(stmt.get(), 1);
  }
  if (rc != SQLITE_DONE) return StoreError(reader_.get(), "counting jobs");
  return counts;
}

absl::StatusOr<std::map<int, DeviceUsage>> JobStore::UsageByDevice() {
  absl::MutexLock lock(&read_mu_);
  sqlite3* db = reader_.get();
  std::map<int, DeviceUsage> usage;
  {
    Statement stmt(db,
                   "SELECT devices, start_time_ms, end_time_ms FROM jobs WHERE start_time_ms > 0;");
    RETURN_IF_ERROR(stmt.status("preparing usage"));
    int rc;
    while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
      AddUsage(sqlite3_column_text(stmt.get(), 0), sqlite3_column_int64(stmt.get(), 1),
               sqlite3_column_int64(stmt.get(), 2), &usage);
    }
    if (rc != SQLITE_DONE) return StoreError(db, "reading device usage");
  }
  Statement pruned(db, "SELECT device, busy_ms, jobs_run FROM pruned_devices;");
  RETURN_IF_ERROR(pruned.status("preparing pruned usage"));
  int rc;
  while ((rc = sqlite3_step(pruned.get())) == SQLITE_ROW) {
    DeviceUsage& u = usage[sqlite3_column_int(pruned.get(), 0)];
    u.busy_ms += sqlite3_column_double(pruned.get(), 1);
    u.jobs_run += sqlite3_column_int64(pruned.get(), 2);
  }
  if (rc != SQLITE_DONE) return StoreError(db, "reading pruned device usage");
  return usage;
}

absl::StatusOr<uint64_t> JobStore::MaxPrunedSequence(sqlite3* db) {
  Statement stmt(db, "SELECT value FROM meta WHERE key = ?;");
  RETURN_IF_ERROR(stmt.status("preparing meta"));
  sqlite3_bind_text(stmt.get(), 1, kMaxPrunedKey, -1, SQLITE_STATIC);
  const int rc = sqlite3_step(stmt.get());
  if (rc == SQLITE_DONE) return 0;
  if (rc != SQLITE_ROW) return StoreError(db, "reading meta");
  return static_cast<uint64_t>(sqlite3_column_int64(stmt.get(), 0));
}

namespace {

// The end time and sequence of the keep-th finished job to end last, newest
// first (through jobs_by_end); nullopt when there are no more than `keep`.
absl::StatusOr<std::optional<std::pair<int64_t, int64_t>>> KeepCutoff(sqlite3* db,
                                                                       int64_t keep) {
  const std::string sql = absl::StrCat(
      "SELECT end_time_ms, sequence FROM jobs WHERE end_time_ms > 0 AND state IN ",
      FinalStatesSql(), " ORDER BY end_time_ms DESC, sequence DESC LIMIT 1 OFFSET ?;");
  SqliteStatement stmt(db, sql.c_str());
  if (!stmt.prepared()) return StoreError(db, "preparing retention");
  sqlite3_bind_int64(stmt.get(), 1, keep - 1);
  const int rc = sqlite3_step(stmt.get());
  if (rc == SQLITE_DONE) return std::nullopt;
  if (rc != SQLITE_ROW) return StoreError(db, "reading retention");
  return std::make_pair(static_cast<int64_t>(sqlite3_column_int64(stmt.get(), 0)),
                        static_cast<int64_t>(sqlite3_column_int64(stmt.get(), 1)));
}

}  // namespace

absl::StatusOr<bool> JobStore::PruneDue(const RetentionPolicy& policy, int64_t now_ms,
                                        int64_t slack) {
  if (policy.keep_jobs > 0 &&
      finished_rows_.load() > policy.keep_jobs + std::max<int64_t>(slack, 0)) {
    return true;
  }
  if (policy.keep_ms <= 0) return false;
  absl::MutexLock lock(&read_mu_);
  sqlite3* db = reader_.get();
  SqliteStatement oldest(db, "SELECT MIN(end_time_ms) FROM jobs WHERE end_time_ms > 0;");
  if (!oldest.prepared()) return StoreError(db, "preparing retention");
  return sqlite3_step(oldest.get()) == SQLITE_ROW &&
         sqlite3_column_type(oldest.get(), 0) != SQLITE_NULL &&
         sqlite3_column_int64(oldest.get(), 0) < now_ms - policy.keep_ms;
}

absl::StatusOr<int64_t> JobStore::Prune(const RetentionPolicy& policy, int64_t now_ms) {
  if (policy.keep_jobs <= 0 && policy.keep_ms <= 0) return 0;
  absl::MutexLock lock(&write_mu_);
  // A finished job goes when it is not among the keep_jobs that ended last, or
  // when it ended before now - keep_ms. (By end time, so that a job that has
  // just ended is never the one to go.)
  std::string where = absl::StrCat("state IN ", FinalStatesSql(), " AND (0");
  if (policy.keep_jobs > 0) {
    ASSIGN_OR_RETURN(const auto cutoff, KeepCutoff(writer_.get(), policy.keep_jobs));
    if (cutoff.has_value()) {
      const auto [end_ms, sequence] = *cutoff;
      absl::StrAppend(&where, " OR end_time_ms < ", end_ms, " OR (end_time_ms = ", end_ms,
                      " AND sequence < ", sequence, ")");
    }
  }
  if (policy.keep_ms > 0) {
    absl::StrAppend(&where, " OR end_time_ms < ", now_ms - policy.keep_ms);
  }
  absl::StrAppend(&where, ")");

  // One transaction: the rows chosen are the rows deleted, and the totals move
  // with them, or nothing changes.
  RETURN_IF_ERROR(writer_.Exec("BEGIN IMMEDIATE;"));
  absl::StatusOr<int64_t> pruned = PruneLocked(where);
  if (!pruned.ok()) {
    writer_.Exec("ROLLBACK;").IgnoreError();
    return pruned.status();
  }
  RETURN_IF_ERROR(writer_.Exec("COMMIT;"));
  finished_rows_.fetch_sub(*pruned);
  return pruned;
}

absl::StatusOr<int64_t> JobStore::PruneLocked(const std::string& where) {
  sqlite3* db = writer_.get();
  std::map<int, int64_t> by_state;
  std::map<int, DeviceUsage> usage;
  uint64_t max_sequence = 0;
  int64_t count = 0;
  {
    const std::string sql = absl::StrCat(
        "SELECT sequence, state, devices, start_time_ms, end_time_ms, counted FROM jobs WHERE ",
        where, ";");
    Statement stmt(db, sql.c_str());
    RETURN_IF_ERROR(stmt.status("preparing prune"));
    int rc;
    while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
      max_sequence =
          std::max(max_sequence, static_cast<uint64_t>(sqlite3_column_int64(stmt.get(), 0)));
      if (sqlite3_column_int(stmt.get(), 5) != 0) ++by_state[sqlite3_column_int(stmt.get(), 1)];
      AddUsage(sqlite3_column_text(stmt.get(), 2), sqlite3_column_int64(stmt.get(), 3),
               sqlite3_column_int64(stmt.get(), 4), &usage);
      ++count;
    }
    if (rc != SQLITE_DONE) return StoreError(db, "choosing jobs to prune");
  }
  if (count == 0) return 0;
  for (const auto& [state, jobs] : by_state) {
    Statement up(db,
                 "INSERT INTO pruned_states (state, jobs) VALUES (?1, ?2) "
                 "ON CONFLICT(state) DO UPDATE SET jobs = jobs + ?2;");
    RETURN_IF_ERROR(up.status("preparing pruned states"));
    sqlite3_bind_int(up.get(), 1, state);
    sqlite3_bind_int64(up.get(), 2, jobs);
    if (sqlite3_step(up.get()) != SQLITE_DONE) return StoreError(db, "storing pruned states");
  }
  for (const auto& [device, u] : usage) {
    Statement up(db,
                 "INSERT INTO pruned_devices (device, busy_ms, jobs_run) VALUES (?1, ?2, ?3) "
                 "ON CONFLICT(device) DO UPDATE SET busy_ms = busy_ms + ?2, "
                 "jobs_run = jobs_run + ?3;");
    RETURN_IF_ERROR(up.status("preparing pruned devices"));
    sqlite3_bind_int(up.get(), 1, device);
    sqlite3_bind_double(up.get(), 2, u.busy_ms);
    sqlite3_bind_int64(up.get(), 3, u.jobs_run);
    if (sqlite3_step(up.get()) != SQLITE_DONE) return StoreError(db, "storing pruned devices");
  }
  Statement meta(db,
                 "INSERT INTO meta (key, value) VALUES (?1, ?2) "
                 "ON CONFLICT(key) DO UPDATE SET value = MAX(value, ?2);");
  RETURN_IF_ERROR(meta.status("preparing meta"));
  sqlite3_bind_text(meta.get(), 1, kMaxPrunedKey, -1, SQLITE_STATIC);
  sqlite3_bind_int64(meta.get(), 2, static_cast<sqlite3_int64>(max_sequence));
  if (sqlite3_step(meta.get()) != SQLITE_DONE) return StoreError(db, "storing meta");
  for (const char* table : {"summaries", "op_results"}) {
    if (auto s = writer_.Exec(absl::StrCat("DELETE FROM ", table,
                                           " WHERE sequence IN (SELECT sequence FROM jobs WHERE ",
                                           where, ");"));
        !s.ok()) {
      return s;
    }
  }
  if (auto s = writer_.Exec(absl::StrCat("DELETE FROM jobs WHERE ", where, ";")); !s.ok()) {
    return s;
  }
  return count;
}

}  // namespace overlap::jobs
