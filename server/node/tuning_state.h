// The node's tuning state as NodeService reads and changes it: the schedules
// autotune chose and kept, each marked current where a job on this daemon can
// use it. The interface keeps the gRPC layer apart from the runner's tuning
// cache (server/runner/tuning_cache.h), which CacheTuningState adapts.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "overlap/v1/overlap.pb.h"
#include "server/engine/engine.h"

namespace overlap::runner {
class TuningCache;
}

namespace overlap::node {

class TuningState {
 public:
  virtual ~TuningState() = default;
  // Every kept choice matching `filter`. INVALID_ARGUMENT for a bad filter,
  // FAILED_PRECONDITION where the daemon has no tuning cache.
  virtual absl::StatusOr<std::vector<v1::TunedSchedule>> List(const v1::TuningFilter& filter) = 0;
  // Forgets the choices matching `filter` and returns how many; errors as List's.
  virtual absl::StatusOr<int> Forget(const v1::TuningFilter& filter) = 0;
  // The planner's calibration for `tp` ranks (0: every device) under the
  // current environment: NOT_FOUND when none was stored.
  virtual absl::StatusOr<v1::GetCalibrationResponse> GetCalibration(int tp) = 0;
  // Checks and keeps `json`: INVALID_ARGUMENT when it is no calibration,
  // FAILED_PRECONDITION naming what differs when measured on other hardware
  // or libraries. Returns the environment it is kept under.
  virtual absl::StatusOr<std::string> PutCalibration(const std::string& json, int tp) = 0;
};

// Over `cache` (may be null: the daemon could not open one) and the devices
// of `engine`, which decide which choices are current. Both must outlive it.
std::unique_ptr<TuningState> CacheTuningState(runner::TuningCache* cache,
                                              const engine::Engine& engine);

}  // namespace overlap::node
