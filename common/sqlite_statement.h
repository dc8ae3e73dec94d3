// A prepared SQLite statement, finalized on destruction: what the job store and
// the Xid log both need. Header only: the libraries that use it link SQLite.
#pragma once

#include <sqlite3.h>

namespace overlap {

class SqliteStatement {
 public:
  SqliteStatement(sqlite3* db, const char* sql) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~SqliteStatement() { sqlite3_finalize(stmt_); }
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;

  // False when preparing failed (sqlite3_errmsg of the database says why).
  bool prepared() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return stmt_; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_OK;
};

}  // namespace overlap
