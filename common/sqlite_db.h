// The one way overlapd opens its SQLite databases (job store, tuning cache,
// Xid log): WAL, synchronous=FULL, a 5 s busy timeout, and SQLite's errors as
// absl::Status codes that mean the same to every caller:
//   SQLITE_FULL                          -> RESOURCE_EXHAUSTED (disk full)
//   SQLITE_CORRUPT, SQLITE_NOTADB        -> DATA_LOSS
//   SQLITE_CANTOPEN, _READONLY, _PERM    -> FAILED_PRECONDITION (fix the files)
//   SQLITE_BUSY, SQLITE_LOCKED           -> UNAVAILABLE
//   anything else                        -> INTERNAL
// Thread-compatible: a SqliteDb is one connection; its owner serializes use.
#pragma once

#include <sqlite3.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace overlap {

inline constexpr int kSqliteBusyTimeoutMs = 5000;

// The status for SQLite's last error on `db` (codes above), saying `what`
// failed and SQLite's message.
absl::Status SqliteError(sqlite3* db, absl::string_view what);

class SqliteDb {
 public:
  enum class Mode { kReadWrite, kReadOnly };

  // Opens (creating it in kReadWrite mode) the database at `path`. In
  // kReadWrite mode a file SQLite could open only for reading (its mode, its
  // directory) is FAILED_PRECONDITION, never a store that fails every write.
  static absl::StatusOr<SqliteDb> Open(const std::string& path, Mode mode = Mode::kReadWrite);

  SqliteDb() = default;
  ~SqliteDb();
  SqliteDb(SqliteDb&& other) noexcept : db_(other.db_) { other.db_ = nullptr; }
  SqliteDb& operator=(SqliteDb&& other) noexcept;
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  sqlite3* get() const { return db_; }

  // Runs `sql` (one or more statements without results).
  absl::Status Exec(absl::string_view sql) const;

 private:
  explicit SqliteDb(sqlite3* db) : db_(db) {}
  sqlite3* db_ = nullptr;
};

}  // namespace overlap
