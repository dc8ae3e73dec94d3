// Runs one job's layer graph on an engine: per op, setup, GEMM-alone and
// comm-alone baselines, (autotune,) warm-up, timed iterations, verification.
// Called on the daemon's executor thread, never on a gRPC thread.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/graph.h"
#include "server/engine/engine.h"
#include "server/ops/decided_schedules.h"
#include "server/runner/job_report.h"
#include "server/runner/run_hooks.h"

namespace overlap::runner {

class TuningCache;  // server/runner/tuning_cache.h

// Where a run takes the schedule of an op whose graph leaves it open (auto).
struct ScheduleSource {
  // Decided before the run, by op id (a part of a job spanning daemons: by
  // its coordinator): every op runs its decision, and nothing is timed to
  // choose. Null: a local job.
  const ops::DecidedSchedules* decided = nullptr;
  // A local job: the cache answers for an op it tuned before, else autotune
  // chooses and the cache keeps the choice. May be null.
  TuningCache* tuning_cache = nullptr;
  // Why each decided schedule was chosen (for the report); may be null.
  const ops::DecisionNotes* decided_notes = nullptr;
};

// `devices` is the resolved, validated TP group (rank i = devices[i]).
// Returns what it measured (job_report.h), or: CANCELLED when hooks.cancelled()
// fired, ABORTED when a communicator was aborted, FAILED_PRECONDITION when
// verification or a hazard check failed (or an op whose group spans daemons
// has no decided schedule), RESOURCE_EXHAUSTED when buffers did not fit, or
// the engine's error.
absl::StatusOr<JobReport> RunJob(engine::Engine& engine, const JobSpec& spec,
                                 const std::vector<int>& devices, const RunHooks& hooks,
                                 const ScheduleSource& source);
// A local job, with its tuning cache (may be null).
inline absl::StatusOr<JobReport> RunJob(engine::Engine& engine, const JobSpec& spec,
                                        const std::vector<int>& devices, const RunHooks& hooks,
                                        TuningCache* tuning_cache) {
  return RunJob(engine, spec, devices, hooks, ScheduleSource{nullptr, tuning_cache});
}

// The heat head start before a gated timed iteration (JobSpec::heat_head_start):
// `whole_gemms` runs of the per-rank GEMM, then one over its first `rows` rows,
// together covering 1.25x the host's enqueue time `host_ms` plus a margin. The
// share is a power of two (down to 1/kHeadStartMinShare of the m rows), so
// that the GEMM shapes to tune stay few. `gemm_ms` is the whole GEMM's time.
inline constexpr double kHeadStartMarginMs = 0.02;
inline constexpr int64_t kHeadStartMinShare = 16;
struct HeadStartPlan {
  int whole_gemms = 0;
  int64_t rows = 0;
};
HeadStartPlan PlanHeadStart(double host_ms, double gemm_ms, int64_t m);
// Every row count short of m that PlanHeadStart may choose, largest first.
std::vector<int64_t> HeadStartRows(int64_t m);

// Before a phase whose figures are compared (autotune's rounds, the timed
// rounds, the layer step), the GPUs run the op's GEMM for the engine's
// PreheatMs (config preheat_ms; heat head start only):
// the host's setup, the previous op's float64 check and a collective alone let
// the SMs rest for seconds, and a rested GPU runs its next GEMMs faster under
// the power cap. Without it autotune's first candidates (serial, bulk) ran 3-5%
// faster in stage one than in the runoff, the rings (last) did not, and it
// picked them where rings won. PyTorch's peers start each phase the same way
// (bench/peers/torch_tp.py --preheat-ms). How many whole GEMMs of `gemm_ms`
// cover `ms` (at least 1, at most kPreheatMaxGemms: launches are not free).
inline constexpr int kPreheatMaxGemms = 2000;
int PreheatGemms(double ms, double gemm_ms);

// What a job allocates on each device of its group of `tp` ranks.
struct JobBytes {
  // Its largest op alone (ops run one after another and free their buffers):
  // a device with less cannot run the job, and admission refuses it.
  int64_t required = 0;
  // At most: that, or the layer step's every op at once (layer_memory.h; an
  // aliased input not counted) where the job runs one, whichever is more.
  // The runner skips a layer step that does not fit, with a note.
  int64_t peak = 0;
};
JobBytes JobBytesOf(const JobSpec& spec, int tp);
// Admission's estimate of the job: JobBytesOf(spec, tp).peak.
int64_t JobBytesPerDevice(const JobSpec& spec, int tp);

}  // namespace overlap::runner
