#include "server/node/tuning_state.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/planner/calibration.h"
#include "server/runner/tuning_cache.h"

namespace overlap::node {
namespace {

class CacheState final : public TuningState {
 public:
  CacheState(runner::TuningCache* cache, const engine::Engine& engine)
      : cache_(cache), engine_(engine) {}

  absl::StatusOr<std::vector<v1::TunedSchedule>> List(const v1::TuningFilter& filter) override {
    if (cache_ == nullptr) return NoCache();
    const std::set<std::string> current = CurrentEnvironments();
    absl::StatusOr<runner::TuningFilter> f = FilterOf(filter, current);
    if (!f.ok()) return f.status();
    absl::StatusOr<std::vector<runner::TunedEntry>> entries = cache_->List(*f);
    if (!entries.ok()) return entries.status();
    std::vector<v1::TunedSchedule> out;
    for (const runner::TunedEntry& e : *entries) {
      v1::TunedSchedule& t = out.emplace_back();
      t.set_key(e.key.Text());
      t.set_op_type(e.key.op_type);
      t.set_m(e.key.m);
      t.set_k(e.key.k);
      t.set_n(e.key.n);
      t.set_dtype(e.key.dtype);
      t.set_tp(e.key.tp);
      t.set_requested(e.key.requested);
      t.set_schedule(e.choice.schedule.Name());
      t.set_step_ms(e.choice.step_ms);
      t.set_tuned_unix_ms(e.tuned_unix_ms);
      t.set_environment(e.key.environment);
      t.set_current(current.count(e.key.environment) > 0);
    }
    return out;
  }

  absl::StatusOr<int> Forget(const v1::TuningFilter& filter) override {
    if (cache_ == nullptr) return NoCache();
    absl::StatusOr<runner::TuningFilter> f = FilterOf(filter, CurrentEnvironments());
    if (!f.ok()) return f.status();
    return cache_->Forget(*f);
  }

  absl::StatusOr<v1::GetCalibrationResponse> GetCalibration(int tp) override {
    if (cache_ == nullptr) return NoCache();
    const std::string environment = runner::TuningEnvironment(engine_, 0);
    const int ranks = RanksOf(tp);
    std::optional<runner::StoredCalibration> stored =
        cache_->LookupCalibration(runner::CalibrationKey(environment, ranks));
    if (!stored) {
      return absl::NotFoundError(absl::StrCat(
          "no calibration for ", ranks, " rank(s) under this daemon's current build, GPUs and "
          "libraries: run `overlapctl calibrate` (it measures) or `overlapctl calibrate --from "
          "FILE... --store`"));
    }
    v1::GetCalibrationResponse out;
    out.set_calibration_json(stored->json);
    out.set_stored_unix_ms(stored->stored_unix_ms);
    out.set_environment(environment);
    return out;
  }

  absl::StatusOr<std::string> PutCalibration(const std::string& json, int tp) override {
    if (cache_ == nullptr) return NoCache();
    absl::StatusOr<planner::Calibration> calibration = planner::CalibrationFromJson(json);
    if (!calibration.ok()) return calibration.status();
    if (absl::Status s = planner::CheckCalibrationMatches(
            *calibration, runner::CalibrationIdentityOf(engine_, 0));
        !s.ok()) {
      return s;
    }
    const std::string environment = runner::TuningEnvironment(engine_, 0);
    absl::Status stored = cache_->StoreCalibration(
        runner::CalibrationKey(environment, RanksOf(tp)), planner::CalibrationToJson(*calibration),
        absl::ToUnixMillis(absl::Now()));
    if (!stored.ok()) return stored;
    return environment;
  }

 private:
  int RanksOf(int tp) const { return tp > 0 ? tp : engine_.DeviceCount(); }

  static absl::Status NoCache() {
    return absl::FailedPreconditionError(
        "this daemon has no tuning cache: it could not open tuning.db in its state directory at "
        "start (see its log); autotune re-tunes every job");
  }

  // The environments (tuning_cache.h) a job on this daemon can tune in: one
  // per GPU model it has.
  std::set<std::string> CurrentEnvironments() const {
    std::set<std::string> out;
    for (int d = 0; d < engine_.DeviceCount(); ++d) {
      out.insert(runner::TuningEnvironment(engine_, d));
    }
    return out;
  }

  static absl::StatusOr<runner::TuningFilter> FilterOf(const v1::TuningFilter& f,
                                                      const std::set<std::string>& current) {
    if (f.m() < 0 || f.k() < 0 || f.n() < 0) {
      return absl::InvalidArgumentError(
          "tuning filter: m, k and n must not be negative (0 = any)");
    }
    runner::TuningFilter out;
    out.op_type = f.op_type();
    if (f.m() > 0) out.m = f.m();
    if (f.k() > 0) out.k = f.k();
    if (f.n() > 0) out.n = f.n();
    if (f.stale_only()) out.stale_unless_in = current;
    return out;
  }

  runner::TuningCache* const cache_;
  const engine::Engine& engine_;
};

}  // namespace

std::unique_ptr<TuningState> CacheTuningState(runner::TuningCache* cache,
                                              const engine::Engine& engine) {
  return std::make_unique<CacheState>(cache, engine);
}

}  // namespace overlap::node
