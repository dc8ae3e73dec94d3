#include "server/ops/tuning_cache.h"

#include <sqlite3.h>

#include "absl/strings/str_cat.h"

namespace overlap::ops {

absl::StatusOr<std::unique_ptr<TuningCache>> TuningCache::Open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("cannot open tuning cache ", path, ": ", msg));
  }
  sqlite3_busy_timeout(db, 5000);
  char* err = nullptr;
  const char* schema =
      "CREATE TABLE IF NOT EXISTS tuning (key TEXT PRIMARY KEY, mode TEXT NOT NULL, "
      "chunks INTEGER NOT NULL, transport TEXT NOT NULL, step_ms REAL NOT NULL, "
      "updated_unix_ms INTEGER NOT NULL)";
  if (sqlite3_exec(db, schema, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("tuning cache ", path, ": ", msg));
  }
  return std::unique_ptr<TuningCache>(new TuningCache(db));
}

TuningCache::~TuningCache() { sqlite3_close(db_); }

std::optional<TunedChoice> TuningCache::Lookup(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT mode, chunks, transport, step_ms FROM tuning WHERE key = ?",
                         -1, &stmt, nullptr) != SQLITE_OK) {
    return std::nullopt;
  }
  sqlite3_bind_text(stmt, 1, key.c_str(), -1, SQLITE_TRANSIENT);
  std::optional<TunedChoice> out;
  if (sqlite3_step(stmt) == SQLITE_ROW) {
    auto mode = ParseOverlapMode(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)));
    auto transport = ParseTransport(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 2)));
    if (mode.ok() && transport.ok() && *mode != OverlapMode::kAuto &&
        *transport != Transport::kAuto) {
      TunedChoice c;
      c.schedule = Schedule{*mode, sqlite3_column_int(stmt, 1), *transport};
      c.step_ms = sqlite3_column_double(stmt, 3);
      out = c;
    }
  }
  sqlite3_finalize(stmt);
  return out;
}

absl::Status TuningCache::Store(const std::string& key, const TunedChoice& choice) {
  std::lock_guard<std::mutex> lock(mu_);
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_,
                         "INSERT OR REPLACE INTO tuning VALUES (?, ?, ?, ?, ?, "
                         "CAST(strftime('%s','now') AS INTEGER) * 1000)",
                         -1, &stmt, nullptr) != SQLITE_OK) {
    return absl::UnavailableError(absl::StrCat("tuning cache: ", sqlite3_errmsg(db_)));
  }
  const std::string mode = OverlapModeName(choice.schedule.mode);
  const std::string transport = TransportName(choice.schedule.transport);
  sqlite3_bind_text(stmt, 1, key.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(stmt, 2, mode.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(stmt, 3, choice.schedule.chunks);
  sqlite3_bind_text(stmt, 4, transport.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(stmt, 5, choice.step_ms);
  const int rc = sqlite3_step(stmt);
  sqlite3_finalize(stmt);
  if (rc != SQLITE_DONE) {
    return absl::UnavailableError(absl::StrCat("tuning cache: ", sqlite3_errmsg(db_)));
  }
  return absl::OkStatus();
}

}  // namespace overlap::ops
