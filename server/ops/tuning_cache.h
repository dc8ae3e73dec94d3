// Autotune choices that survive restarts: one SQLite table in the state
// directory, keyed by everything that can change the winner (op, shape, dtype,
// tp, GPU model, driver, CUDA and NCCL versions). Thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/ops/schedule.h"

struct sqlite3;

namespace overlap::ops {

struct TunedChoice {
  Schedule schedule;
  double step_ms = 0;  // what the winner measured when it was chosen
};

class TuningCache {
 public:
  // Opens (creating if needed) the database at `path`.
  static absl::StatusOr<std::unique_ptr<TuningCache>> Open(const std::string& path);
  ~TuningCache();

  std::optional<TunedChoice> Lookup(const std::string& key);
  absl::Status Store(const std::string& key, const TunedChoice& choice);

 private:
  explicit TuningCache(sqlite3* db) : db_(db) {}
  std::mutex mu_;
  sqlite3* db_;
};

}  // namespace overlap::ops
