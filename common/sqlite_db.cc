#include "common/sqlite_db.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace overlap {
namespace {

absl::Status StatusFor(int code, std::string message) {
  switch (code & 0xFF) {  // the primary code of an extended one
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(absl::StrCat(message, " (the disk is full)"));
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(std::move(message));
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return absl::FailedPreconditionError(std::move(message));
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(std::move(message));
    default:
      return absl::InternalError(std::move(message));
  }
}

}  // namespace

absl::Status SqliteError(sqlite3* db, absl::string_view what) {
  return StatusFor(sqlite3_extended_errcode(db), absl::StrCat(what, ": ", sqlite3_errmsg(db)));
}

absl::StatusOr<SqliteDb> SqliteDb::Open(const std::string& path, Mode mode) {
  sqlite3* raw = nullptr;
  const int flags = mode == Mode::kReadOnly ? SQLITE_OPEN_READONLY
                                            : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  SqliteDb db(raw);
  if (rc != SQLITE_OK) {
    return StatusFor(rc, absl::StrCat("cannot open ", path, ": ",
                                      raw != nullptr ? sqlite3_errmsg(raw) : sqlite3_errstr(rc)));
  }
  if (mode == Mode::kReadWrite && sqlite3_db_readonly(raw, "main") == 1) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " can only be read (its mode, owner or directory): overlapd must "
                           "be able to write it"));
  }
  sqlite3_busy_timeout(raw, kSqliteBusyTimeoutMs);
  if (mode == Mode::kReadWrite) {
    // WAL + FULL: a committed write is on disk before the call that made it
    // returns, and readers on other connections never wait for the writer.
    if (absl::Status s = db.Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
    }
  }
  return db;
}

SqliteDb::~SqliteDb() {
  if (db_ != nullptr) sqlite3_close(db_);
}

SqliteDb& SqliteDb::operator=(SqliteDb&& other) noexcept {
  if (this != &other) {
    if (db_ != nullptr) sqlite3_close(db_);
    db_ = other.db_;
    other.db_ = nullptr;
  }
  return *this;
}

absl::Status SqliteDb::Exec(absl::string_view sql) const {
  char* error = nullptr;
  const std::string text(sql);
  if (sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    absl::Status status = StatusFor(sqlite3_extended_errcode(db_),
                                    error != nullptr ? error : sqlite3_errmsg(db_));
    sqlite3_free(error);
    return status;
  }
  return absl::OkStatus();
}

}  // namespace overlap
