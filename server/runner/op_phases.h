// The phases the job runner measures one op in, each returning what it
// measured (op_measurement.h): setting up its buffers and inputs, choosing its
// schedule (autotune), timing the collective alone, the timed rounds (GEMM
// alone, GEMM beside the collective, the step), one traced iteration, and the
// check against float64. RunJob (job_runner.h) runs them in that order.
#pragma once

#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "common/graph.h"
#include "server/ops/op_context.h"
#include "server/runner/op_measurement.h"
#include "server/runner/op_run.h"
#include "server/runner/tuning_cache.h"

namespace overlap::runner {

// Where one job's run takes its ops' schedules (job_runner.h, ScheduleSource):
// decisions made before it, or the tuning cache, whose choices tuned before
// not_before_unix_ms do not answer (JobSpec::retune).
struct ChoiceSources {
  const ops::DecidedSchedules* decided = nullptr;
  TuningCache* cache = nullptr;
  int64_t not_before_unix_ms = 0;
  const ops::DecisionNotes* decided_notes = nullptr;  // may be null
};

// `devices` (the job's) reordered group after group for `group` (common/
// graph.h, GroupsOf): the order an op's context holds its ranks in.
std::vector<int> GroupMajorDevices(const JobSpec& spec, const std::vector<int>& devices,
                                   OpGroup group);

// The op's buffers, sized for every schedule auto may try; RESOURCE_EXHAUSTED
// when they do not fit.
absl::StatusOr<std::unique_ptr<ops::OpContext>> CreateOpContext(engine::Engine& engine,
                                                                const JobSpec& spec,
                                                                const std::vector<int>& devices,
                                                                const OpSpec& op);

// Random inputs, then one serial iteration so that every intermediate buffer
// holds real data, then the heat probe (OpRun::ProbeHeat).
absl::Status PrepareInputs(OpRun& run);

// Whether some of `devices` live in another process: a job spanning daemons
// (server/cluster/spanning_engine.h).
bool SpansDaemons(const engine::Engine& engine, const std::vector<int>& devices);

// The op's schedule: the one decided before the run (`sources.decided`: a
// job spanning daemons has one for every op, or RunJob refuses it before its
// first op), the one it asked for, or auto's choice: from the tuning cache,
// or by autotune (rounds over every candidate, then a runoff), kept in the
// cache.
absl::StatusOr<ScheduleChoice> ChooseSchedule(OpRun& run, const ChoiceSources& sources);

// The collective alone on both transports, where the op has a GEMM beside a
// collective and more than one rank; the faster is comm alone.
absl::StatusOr<CommAlone> TimeCommAlone(OpRun& run);

// How many back-to-back iterations of a GEMM of `gemm_ms` fill `sustain_ms`
// (JobSpec::gemm_alone_sustain_ms): at least `at_least` and 2, at most 100,000.
int SustainedIterations(double sustain_ms, double gemm_ms, int at_least);

// The GEMM alone, the GEMM beside the collective (over `beside`) and the step
// of `schedule`, alternating in rounds: sustained GEMMs lower the SM clock
// within seconds, so measuring one long after the other would put them at
// different clocks and skew step / ideal and the slowdown either way. With
// JobSpec::gemm_alone_sustain_ms the GEMM alone is then timed once more,
// back to back for that long, and that run's second half is the figure: the
// clock a layer step that runs for seconds is held to.
absl::StatusOr<TimedRounds> TimeRounds(OpRun& run, const ops::Schedule& schedule, Transport beside);

// One more iteration of `schedule`, traced span by span, where spec.timeline.
absl::StatusOr<std::optional<Timeline>> TraceOp(OpRun& run, const ops::Schedule& schedule);

// Where spec.verify: outputs poisoned, one iteration of `schedule`, the result
// against float64. FAILED_PRECONDITION naming the op when it is off by more
// than the dtype's tolerance.
absl::StatusOr<std::optional<ops::Verification>> VerifyOp(OpRun& run,
                                                          const ops::Schedule& schedule);

}  // namespace overlap::runner
