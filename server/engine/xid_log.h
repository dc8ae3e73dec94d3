// The Xid errors the daemon saw, kept in its state directory (xids.db), so that
// a restart does not wipe them. That matters most right after an Xid: a GPU
// whose context is lost makes the daemon exit for systemd to restart it, and
// `overlapctl health` must still name that GPU afterwards. Counts cover the
// machine's current boot (a reboot resets the GPUs, and the old boot's counts
// are dropped when the log opens); Xids while no daemon ran are not seen.
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/sqlite_db.h"
#include "absl/synchronization/mutex.h"


namespace overlap::engine {

struct XidCounts {
  int64_t all = 0;
  int64_t gpu = 0;  // those that point at the GPU (common/xid.h)
  uint64_t last = 0;
  int64_t last_unix_ms = 0;
};

class XidLog {
 public:
  static constexpr char kFileName[] = "xids.db";

  // Opens (creating it and `state_dir` where missing) state_dir/xids.db for
  // boot `boot_id`, and drops the counts of every other boot.
  static absl::StatusOr<std::unique_ptr<XidLog>> Open(const std::string& state_dir,
                                                      const std::string& boot_id);
  ~XidLog();
  XidLog(const XidLog&) = delete;
  XidLog& operator=(const XidLog&) = delete;

  // This boot's counts per GPU, keyed by PCI bus id.
  absl::StatusOr<std::map<std::string, XidCounts>> Counts() const;
  // Counts one Xid of the GPU at `pci_bus_id`; on disk when it returns.
  absl::Status Record(const std::string& pci_bus_id, uint64_t xid, int64_t unix_ms);
  // Drops this boot's counts of the GPU at `pci_bus_id` (after a GPU reset).
  absl::Status Forget(const std::string& pci_bus_id);

 private:
  XidLog(SqliteDb db, std::string boot_id) : db_(std::move(db)), boot_id_(std::move(boot_id)) {}

  mutable absl::Mutex mu_;
  SqliteDb db_ ABSL_GUARDED_BY(mu_);
  const std::string boot_id_;
};

// The kernel's id of this boot (/proc/sys/kernel/random/boot_id); "unknown"
// where it cannot be read, so that counts then never expire.
std::string CurrentBootId();

}  // namespace overlap::engine
