// Autotune choices that survive restarts: one SQLite table in the state
// directory, keyed by everything that can change the winner: the op (type,
// shape, dtype, tp, the mode/chunks/transport it asked for) and the
// environment (backend and its settings, GPU model, driver, CUDA and NCCL
// versions, and the overlapd build, whose schedules change between versions).
// `overlapctl tuning` lists and forgets them. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/planner/calibration.h"
#include "common/sqlite_db.h"
#include "server/engine/engine.h"
#include "common/schedule.h"

namespace overlap::runner {

// What, besides the op, can change autotune's winner on `device` (its model)
// under this engine: backend settings, versions, the overlapd build and the
// NCCL_*/CUDA_* environment. Part of every tuning cache key.
std::string TuningEnvironment(const engine::Engine& engine, int device);

// The key a calibration is kept under: the environment (as the choices') and
// the ranks its transfers were measured at.
std::string CalibrationKey(const std::string& environment, int tp);
// What a calibration for `device` of `engine` must have been measured on.
planner::CalibrationIdentity CalibrationIdentityOf(const engine::Engine& engine, int device);

struct StoredCalibration {
  std::string json;
  int64_t stored_unix_ms = 0;
};

class TuningCache;

// The calibration `cache` keeps for `tp` ranks of `device`'s environment,
// parsed and checked against what `engine` runs (planner::
// CheckCalibrationMatches): NOT_FOUND where none is kept; the parse's or the
// check's error where it cannot be used here.
absl::StatusOr<planner::Calibration> MatchingCalibration(TuningCache& cache,
                                                         const engine::Engine& engine, int device,
                                                         int tp);

struct TuningKey {
  std::string op_type;
  int64_t m = 0, k = 0, n = 0;
  std::string dtype;
  int tp = 0;
  std::string requested;     // what the op asked auto to choose from, e.g. "auto/0/auto"
  std::string environment;   // backend settings, GPU model, versions, build
  std::string Text() const;  // the table's primary key
};

struct TunedChoice {
  ops::Schedule schedule;
  double step_ms = 0;  // what the winner measured when it was chosen
};

struct TunedEntry {
  TuningKey key;
  TunedChoice choice;
  int64_t tuned_unix_ms = 0;
};

// Which entries Forget removes: all that match every field set.
struct TuningFilter {
  std::string op_type;  // empty = any
  std::optional<int64_t> m, k, n;
  // Only entries whose environment is none of these (tuned by another build, on
  // other GPUs or libraries: no job here can use them). Unset = any.
  std::optional<std::set<std::string>> stale_unless_in;
};

class TuningCache {
 public:
  // Opens (creating if needed) the database at `path`.
  static absl::StatusOr<std::unique_ptr<TuningCache>> Open(const std::string& path);
  ~TuningCache();

  // The choice stored under `key`, unless it was tuned before `not_before_unix_ms`
  // (a job that asked to retune ignores what came before it).
  std::optional<TunedChoice> Lookup(const TuningKey& key, int64_t not_before_unix_ms = 0);
  absl::Status Store(const TuningKey& key, const TunedChoice& choice, int64_t tuned_unix_ms);
  // Every entry that matches, by op type, shape, dtype, tp, then newest first.
  absl::StatusOr<std::vector<TunedEntry>> List(const TuningFilter& filter);
  // Removes the entries that match; returns how many.
  absl::StatusOr<int> Forget(const TuningFilter& filter);

  // The calibration kept under `key` (CalibrationKey), if any.
  std::optional<StoredCalibration> LookupCalibration(const std::string& key);
  absl::Status StoreCalibration(const std::string& key, const std::string& json,
                                int64_t stored_unix_ms);

 private:
  explicit TuningCache(SqliteDb db) : db_(std::move(db)) {}
  absl::StatusOr<std::vector<TunedEntry>> ListLocked(const TuningFilter& filter)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // UNAVAILABLE with SQLite's last error on the database.
  // SQLite's last error, with common/sqlite_db.h's code.
  absl::Status StoreError() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Mutex mu_;
  SqliteDb db_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap::runner
