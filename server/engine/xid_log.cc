#include "server/engine/xid_log.h"

#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/sqlite_statement.h"
#include "common/xid.h"

namespace overlap::engine {
namespace {

constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS xid_counts (
  boot_id TEXT NOT NULL,
  gpu TEXT NOT NULL,
  all_count INTEGER NOT NULL,
  gpu_count INTEGER NOT NULL,
  last_xid INTEGER NOT NULL,
  last_unix_ms INTEGER NOT NULL,
  PRIMARY KEY (boot_id, gpu)
);
)sql";

absl::Status Error(sqlite3* db, absl::string_view what) {
  return absl::InternalError(absl::StrCat("Xid log: ", what, ": ", sqlite3_errmsg(db)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<XidLog>> XidLog::Open(const std::string& state_dir,
                                                     const std::string& boot_id) {
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("state_dir ", state_dir, ": cannot create: ", ec.message()));
  }
  const std::string path = (std::filesystem::path(state_dir) / kFileName).string();
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status status = absl::InvalidArgumentError(absl::StrCat(
        "cannot open ", path, ": ", db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
    sqlite3_close(db);
    return status;
  }
  std::unique_ptr<XidLog> log(new XidLog(db, boot_id));
  absl::MutexLock lock(&log->mu_);
  sqlite3_busy_timeout(db, 2000);
  for (const char* sql : {"PRAGMA journal_mode=WAL;", "PRAGMA synchronous=FULL;", kSchema}) {
    if (absl::Status s = log->Exec(sql); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
    }
  }
  // Another boot's counts describe GPUs that have been reset since.
  SqliteStatement drop(db, "DELETE FROM xid_counts WHERE boot_id != ?;");
  if (!drop.prepared()) return Error(db, "preparing");
  sqlite3_bind_text(drop.get(), 1, boot_id.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(drop.get()) != SQLITE_DONE) return Error(db, "dropping other boots' counts");
  return log;
}

XidLog::~XidLog() {
  absl::MutexLock lock(&mu_);
  sqlite3_close(db_);
}

absl::Status XidLog::Exec(const char* sql) const {
  char* message = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    absl::Status status = absl::InternalError(
        absl::StrCat("Xid log: ", message != nullptr ? message : sqlite3_errmsg(db_)));
    sqlite3_free(message);
    return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, XidCounts>> XidLog::Counts() const {
  absl::MutexLock lock(&mu_);
  SqliteStatement select(db_,
                         "SELECT gpu, all_count, gpu_count, last_xid, last_unix_ms FROM xid_counts "
                         "WHERE boot_id = ?;");
  if (!select.prepared()) return Error(db_, "preparing");
  sqlite3_bind_text(select.get(), 1, boot_id_.c_str(), -1, SQLITE_TRANSIENT);
  std::map<std::string, XidCounts> out;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(select.get())) == SQLITE_ROW) {
    XidCounts& c = out[reinterpret_cast<const char*>(sqlite3_column_text(select.get(), 0))];
    c.all = sqlite3_column_int64(select.get(), 1);
    c.gpu = sqlite3_column_int64(select.get(), 2);
    c.last = static_cast<uint64_t>(sqlite3_column_int64(select.get(), 3));
    c.last_unix_ms = sqlite3_column_int64(select.get(), 4);
  }
  if (rc != SQLITE_DONE) return Error(db_, "reading the counts");
  return out;
}

absl::Status XidLog::Record(const std::string& pci_bus_id, uint64_t xid, int64_t unix_ms) {
  absl::MutexLock lock(&mu_);
  SqliteStatement upsert(
      db_,
      "INSERT INTO xid_counts VALUES (?, ?, 1, ?, ?, ?) "
      "ON CONFLICT (boot_id, gpu) DO UPDATE SET all_count = all_count + 1, "
      "gpu_count = gpu_count + excluded.gpu_count, last_xid = excluded.last_xid, "
      "last_unix_ms = excluded.last_unix_ms;");
  if (!upsert.prepared()) return Error(db_, "preparing");
  sqlite3_bind_text(upsert.get(), 1, boot_id_.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(upsert.get(), 2, pci_bus_id.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(upsert.get(), 3, XidPointsAtTheGpu(xid) ? 1 : 0);
  sqlite3_bind_int64(upsert.get(), 4, static_cast<int64_t>(xid));
  sqlite3_bind_int64(upsert.get(), 5, unix_ms);
  if (sqlite3_step(upsert.get()) != SQLITE_DONE) return Error(db_, "recording an Xid");
  return absl::OkStatus();
}

absl::Status XidLog::Forget(const std::string& pci_bus_id) {
  absl::MutexLock lock(&mu_);
  SqliteStatement drop(db_, "DELETE FROM xid_counts WHERE boot_id = ? AND gpu = ?;");
  if (!drop.prepared()) return Error(db_, "preparing");
  sqlite3_bind_text(drop.get(), 1, boot_id_.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(drop.get(), 2, pci_bus_id.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(drop.get()) != SQLITE_DONE) return Error(db_, "forgetting a GPU's Xids");
  return absl::OkStatus();
}

std::string CurrentBootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!std::getline(in, id)) return "unknown";
  id = std::string(absl::StripAsciiWhitespace(id));
  return id.empty() ? "unknown" : id;
}

}  // namespace overlap::engine
