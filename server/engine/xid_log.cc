#include "server/engine/xid_log.h"

#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/sqlite_db.h"
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
  return SqliteError(db, absl::StrCat("Xid log: ", what));
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
  absl::StatusOr<SqliteDb> db = SqliteDb::Open(path);
  if (!db.ok()) return db.status();
  if (absl::Status s = db->Exec(kSchema); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  }
  std::unique_ptr<XidLog> log(new XidLog(std::move(*db), boot_id));
  absl::MutexLock lock(&log->mu_);
  sqlite3* raw = log->db_.get();
  // Another boot's counts describe GPUs that have been reset since.
  SqliteStatement drop(raw, "DELETE FROM xid_counts WHERE boot_id != ?;");
  if (!drop.prepared()) return Error(raw, "preparing");
  sqlite3_bind_text(drop.get(), 1, boot_id.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(drop.get()) != SQLITE_DONE) return Error(raw, "dropping other boots' counts");
  return log;
}

XidLog::~XidLog() = default;

absl::StatusOr<std::map<std::string, XidCounts>> XidLog::Counts() const {
  absl::MutexLock lock(&mu_);
  SqliteStatement select(db_.get(),
                         "SELECT gpu, all_count, gpu_count, last_xid, last_unix_ms FROM xid_counts "
                         "WHERE boot_id = ?;");
  if (!select.prepared()) return Error(db_.get(), "preparing");
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
  if (rc != SQLITE_DONE) return Error(db_.get(), "reading the counts");
  return out;
}

absl::Status XidLog::Record(const std::string& pci_bus_id, uint64_t xid, int64_t unix_ms) {
  absl::MutexLock lock(&mu_);
  SqliteStatement upsert(
      db_.get(),
      "INSERT INTO xid_counts VALUES (?, ?, 1, ?, ?, ?) "
      "ON CONFLICT (boot_id, gpu) DO UPDATE SET all_count = all_count + 1, "
      "gpu_count = gpu_count + excluded.gpu_count, last_xid = excluded.last_xid, "
      "last_unix_ms = excluded.last_unix_ms;");
  if (!upsert.prepared()) return Error(db_.get(), "preparing");
  sqlite3_bind_text(upsert.get(), 1, boot_id_.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(upsert.get(), 2, pci_bus_id.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(upsert.get(), 3, XidPointsAtTheGpu(xid) ? 1 : 0);
  sqlite3_bind_int64(upsert.get(), 4, static_cast<int64_t>(xid));
  sqlite3_bind_int64(upsert.get(), 5, unix_ms);
  if (sqlite3_step(upsert.get()) != SQLITE_DONE) return Error(db_.get(), "recording an Xid");
  return absl::OkStatus();
}

absl::Status XidLog::Forget(const std::string& pci_bus_id) {
  absl::MutexLock lock(&mu_);
  SqliteStatement drop(db_.get(), "DELETE FROM xid_counts WHERE boot_id = ? AND gpu = ?;");
  if (!drop.prepared()) return Error(db_.get(), "preparing");
  sqlite3_bind_text(drop.get(), 1, boot_id_.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(drop.get(), 2, pci_bus_id.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(drop.get()) != SQLITE_DONE) return Error(db_.get(), "forgetting a GPU's Xids");
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
