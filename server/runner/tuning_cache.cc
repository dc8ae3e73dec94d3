#include "server/runner/tuning_cache.h"

#include <sqlite3.h>

#include "absl/strings/str_cat.h"
#include "common/library_env.h"
#include "overlap_git_commit.h"
#include "common/sqlite_db.h"
#include "common/sqlite_statement.h"
#include "common/status_macros.h"

namespace overlap::runner {

using ops::Schedule;
namespace {

// The first table (`tuning`, until 0.1) keyed choices by a string without the
// overlapd build: its entries are dropped, and re-tuned on first use.
constexpr char kSchema[] =
    "DROP TABLE IF EXISTS tuning;"
    "CREATE TABLE IF NOT EXISTS tuned_schedules (key TEXT PRIMARY KEY, op_type TEXT NOT NULL, "
    "m INTEGER NOT NULL, k INTEGER NOT NULL, n INTEGER NOT NULL, dtype TEXT NOT NULL, "
    "tp INTEGER NOT NULL, requested TEXT NOT NULL, environment TEXT NOT NULL, "
    "mode TEXT NOT NULL, chunks INTEGER NOT NULL, transport TEXT NOT NULL, "
    "step_ms REAL NOT NULL, tuned_unix_ms INTEGER NOT NULL, algorithm TEXT NOT NULL DEFAULT '');"
    // The planner's calibrations (common/planner/calibration.h), keyed as the
    // choices are: environment and ranks.
    "CREATE TABLE IF NOT EXISTS calibrations (key TEXT PRIMARY KEY, json TEXT NOT NULL, "
    "stored_unix_ms INTEGER NOT NULL)";
// Tables made before all_reduce algorithms lack the column; their rows keep
// the default algorithm.
constexpr char kAddAlgorithm[] =
    "ALTER TABLE tuned_schedules ADD COLUMN algorithm TEXT NOT NULL DEFAULT ''";

constexpr char kColumns[] =
    "key, op_type, m, k, n, dtype, tp, requested, environment, mode, chunks, transport, step_ms, "
    "tuned_unix_ms, algorithm";

std::string Text(sqlite3_stmt* stmt, int column) {
  const unsigned char* text = sqlite3_column_text(stmt, column);
  return text ? reinterpret_cast<const char*>(text) : "";
}

// Whether the runner can cut an op of `m` rows over `tp` ranks into `chunks`
// pieces as `mode` does: graph_validator's rule for an explicit `chunks`.
bool PiecesFit(OverlapMode mode, int chunks, int64_t m, int tp) {
  if (mode != OverlapMode::kChunked && mode != OverlapMode::kRing) return true;
  return chunks >= 1 && (chunks == 1 || (tp >= 1 && chunks <= m / tp));
}

// A row in kColumns order; nullopt when its schedule no longer parses, or is
// one no op of the row's shape can run (a row changed on disk: handed to the
// runner, chunks 0 would cut an op into no pieces).
std::optional<TunedEntry> ReadEntry(sqlite3_stmt* stmt) {
  TunedEntry e;
  e.key.op_type = Text(stmt, 1);
  e.key.m = sqlite3_column_int64(stmt, 2);
  e.key.k = sqlite3_column_int64(stmt, 3);
  e.key.n = sqlite3_column_int64(stmt, 4);
  e.key.dtype = Text(stmt, 5);
  e.key.tp = sqlite3_column_int(stmt, 6);
  e.key.requested = Text(stmt, 7);
  e.key.environment = Text(stmt, 8);
  auto mode = ParseOverlapMode(Text(stmt, 9));
  auto transport = ParseTransport(Text(stmt, 11));
  auto algorithm = ParseStoredAllReduceAlgorithm(Text(stmt, 14));
  if (!mode.ok() || !transport.ok() || !algorithm.ok() || *mode == OverlapMode::kAuto ||
      *transport == Transport::kAuto) {
    return std::nullopt;
  }
  const int chunks = sqlite3_column_int(stmt, 10);
  if (!PiecesFit(*mode, chunks, e.key.m, e.key.tp)) return std::nullopt;
  e.choice.schedule = Schedule{*mode, chunks, *transport, *algorithm};
  e.choice.step_ms = sqlite3_column_double(stmt, 12);
  e.tuned_unix_ms = sqlite3_column_int64(stmt, 13);
  return e;
}

// Whether the table has the column, without writing anything (a database on a
// full disk still opens).
bool HasAlgorithmColumn(sqlite3* db) {
  return SqliteStatement(db, "SELECT algorithm FROM tuned_schedules LIMIT 0").prepared();
}

bool Matches(const TunedEntry& e, const TuningFilter& f) {
  if (!f.op_type.empty() && e.key.op_type != f.op_type) return false;
  if ((f.m && e.key.m != *f.m) || (f.k && e.key.k != *f.k) || (f.n && e.key.n != *f.n)) {
    return false;
  }
  return !f.stale_unless_in || f.stale_unless_in->count(e.key.environment) == 0;
}

}  // namespace

std::string TuningEnvironment(const engine::Engine& engine, int device) {
  const engine::BackendVersions v = engine.Versions();
  std::string library_env;
  for (const auto& [name, value] : LibraryEnvironment()) {
    // Where the toolkit is installed changes no schedule's speed.
    if (name == "CUDA_HOME" || name == "CUDA_PATH" || name == "CUDA_ROOT") continue;
    absl::StrAppend(&library_env, library_env.empty() ? "" : ",", name, "=", value);
  }
  return absl::StrCat("backend=", engine.Name(),
                      // Replayed and enqueued schedules tune differently (finer pieces pay
                      // once their hand-offs are cheap).
                      " graphs=", engine.Graphs() != nullptr ? "on" : "off",
                      // Ungated, NCCL's candidates carried ~0.1 ms of launch latency.
                      " gates=", engine.Gates() != nullptr ? "on" : "off",
                      // NCCL schedules run differently with an SM budget.
                      " nccl_ctas=", engine.CollectiveSmBudget(),
                      " device=", engine.GetDeviceInfo(device).name, " driver=", v.cuda_driver,
                      " cuda=", v.cuda_runtime, " nccl=", v.nccl,
                      // Schedules change between builds; so do the libraries' settings.
                      " overlapd=", OVERLAP_VERSION, "+", OVERLAP_GIT_COMMIT, " env=", library_env);
}

std::string TuningKey::Text() const {
  return absl::StrCat(op_type, " m=", m, " k=", k, " n=", n, " dtype=", dtype, " tp=", tp,
                      " requested=", requested, " ", environment);
}

absl::StatusOr<std::unique_ptr<TuningCache>> TuningCache::Open(const std::string& path) {
  ASSIGN_OR_RETURN(SqliteDb db, SqliteDb::Open(path));
  absl::Status schema = db.Exec(kSchema);
  if (schema.ok() && !HasAlgorithmColumn(db.get())) schema = db.Exec(kAddAlgorithm);
  if (!schema.ok()) {
    return absl::Status(schema.code(), absl::StrCat("tuning cache ", path, ": ", schema.message()));
  }
  return std::unique_ptr<TuningCache>(new TuningCache(std::move(db)));
}

TuningCache::~TuningCache() = default;

std::optional<TunedChoice> TuningCache::Lookup(const TuningKey& key, int64_t not_before_unix_ms) {
  absl::MutexLock lock(&mu_);
  const std::string sql = absl::StrCat("SELECT ", kColumns, " FROM tuned_schedules WHERE key = ?");
  SqliteStatement statement(db_.get(), sql.c_str());
  if (!statement.prepared()) return std::nullopt;
  sqlite3_stmt* stmt = statement.get();
  const std::string text = key.Text();
  sqlite3_bind_text(stmt, 1, text.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(stmt) != SQLITE_ROW) return std::nullopt;
  std::optional<TunedEntry> entry = ReadEntry(stmt);
  // Store writes the key from the columns; a row whose columns no longer spell
  // it was changed on disk, and its choice was checked against other shapes.
  if (!entry || entry->key.Text() != text || entry->tuned_unix_ms < not_before_unix_ms) {
    return std::nullopt;
  }
  return entry->choice;
}

absl::Status TuningCache::Store(const TuningKey& key, const TunedChoice& choice,
                                int64_t tuned_unix_ms) {
  absl::MutexLock lock(&mu_);
  const std::string sql = absl::StrCat("INSERT OR REPLACE INTO tuned_schedules (", kColumns,
                                       ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  SqliteStatement statement(db_.get(), sql.c_str());
  if (!statement.prepared()) return StoreError();
  sqlite3_stmt* stmt = statement.get();
  const std::string text = key.Text();
  const std::string mode = OverlapModeName(choice.schedule.mode);
  const std::string transport = TransportName(choice.schedule.transport);
  sqlite3_bind_text(stmt, 1, text.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(stmt, 2, key.op_type.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(stmt, 3, key.m);
  sqlite3_bind_int64(stmt, 4, key.k);
  sqlite3_bind_int64(stmt, 5, key.n);
  sqlite3_bind_text(stmt, 6, key.dtype.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(stmt, 7, key.tp);
  sqlite3_bind_text(stmt, 8, key.requested.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(stmt, 9, key.environment.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(stmt, 10, mode.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(stmt, 11, choice.schedule.chunks);
  sqlite3_bind_text(stmt, 12, transport.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(stmt, 13, choice.step_ms);
  sqlite3_bind_int64(stmt, 14, tuned_unix_ms);
  const std::string algorithm = StoredAllReduceAlgorithm(choice.schedule.algorithm);
  sqlite3_bind_text(stmt, 15, algorithm.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(stmt) != SQLITE_DONE) return StoreError();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TunedEntry>> TuningCache::List(const TuningFilter& filter) {
  absl::MutexLock lock(&mu_);
  return ListLocked(filter);
}

absl::StatusOr<std::vector<TunedEntry>> TuningCache::ListLocked(const TuningFilter& filter) {
  const std::string sql = absl::StrCat("SELECT ", kColumns,
                                       " FROM tuned_schedules ORDER BY op_type, m, k, n, dtype, "
                                       "tp, tuned_unix_ms DESC, key");
  SqliteStatement statement(db_.get(), sql.c_str());
  if (!statement.prepared()) return StoreError();
  std::vector<TunedEntry> out;
  int rc;
  while ((rc = sqlite3_step(statement.get())) == SQLITE_ROW) {
    std::optional<TunedEntry> entry = ReadEntry(statement.get());
    if (entry && Matches(*entry, filter)) out.push_back(std::move(*entry));
  }
  if (rc != SQLITE_DONE) return StoreError();
  return out;
}

absl::StatusOr<int> TuningCache::Forget(const TuningFilter& filter) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(std::vector<TunedEntry> doomed, ListLocked(filter));
  SqliteStatement statement(db_.get(), "DELETE FROM tuned_schedules WHERE key = ?");
  if (!statement.prepared()) return StoreError();
  sqlite3_stmt* del = statement.get();
  sqlite3_exec(db_.get(), "BEGIN", nullptr, nullptr, nullptr);
  for (const TunedEntry& entry : doomed) {
    const std::string key = entry.key.Text();
    sqlite3_reset(del);
    sqlite3_bind_text(del, 1, key.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(del) != SQLITE_DONE) {
      const absl::Status error = StoreError();
      sqlite3_exec(db_.get(), "ROLLBACK", nullptr, nullptr, nullptr);
      return error;
    }
  }
  if (sqlite3_exec(db_.get(), "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
    return StoreError();
  }
  return static_cast<int>(doomed.size());
}

std::string CalibrationKey(const std::string& environment, int tp) {
  return absl::StrCat("tp=", tp, " ", environment);
}

planner::CalibrationIdentity CalibrationIdentityOf(const engine::Engine& engine, int device) {
  const engine::BackendVersions v = engine.Versions();
  planner::CalibrationIdentity id;
  id.device = engine.GetDeviceInfo(device).name;
  id.backend = engine.Name();
  id.driver = v.cuda_driver;
  id.cuda = v.cuda_runtime;
  id.nccl = v.nccl;
  id.dtype = "";
  return id;
}

absl::StatusOr<planner::Calibration> MatchingCalibration(TuningCache& cache,
                                                         const engine::Engine& engine, int device,
                                                         int tp) {
  std::optional<StoredCalibration> stored =
      cache.LookupCalibration(CalibrationKey(TuningEnvironment(engine, device), tp));
  if (!stored) return absl::NotFoundError(absl::StrCat("no calibration kept for ", tp, " ranks"));
  ASSIGN_OR_RETURN(planner::Calibration calibration, planner::CalibrationFromJson(stored->json));
  RETURN_IF_ERROR(
      planner::CheckCalibrationMatches(calibration, CalibrationIdentityOf(engine, device)));
  return calibration;
}

std::optional<StoredCalibration> TuningCache::LookupCalibration(const std::string& key) {
  absl::MutexLock lock(&mu_);
  SqliteStatement statement(db_.get(),
                            "SELECT json, stored_unix_ms FROM calibrations WHERE key = ?");
  if (!statement.prepared()) return std::nullopt;
  sqlite3_bind_text(statement.get(), 1, key.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(statement.get()) != SQLITE_ROW) return std::nullopt;
  return StoredCalibration{Text(statement.get(), 0), sqlite3_column_int64(statement.get(), 1)};
}

absl::Status TuningCache::StoreCalibration(const std::string& key, const std::string& json,
                                           int64_t stored_unix_ms) {
  absl::MutexLock lock(&mu_);
  SqliteStatement statement(
      db_.get(), "INSERT OR REPLACE INTO calibrations (key, json, stored_unix_ms) VALUES (?, ?, ?)");
  if (!statement.prepared()) return StoreError();
  sqlite3_bind_text(statement.get(), 1, key.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(statement.get(), 2, json.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(statement.get(), 3, stored_unix_ms);
  if (sqlite3_step(statement.get()) != SQLITE_DONE) return StoreError();
  return absl::OkStatus();
}

absl::Status TuningCache::StoreError() const { return SqliteError(db_.get(), "tuning cache"); }

}  // namespace overlap::runner
