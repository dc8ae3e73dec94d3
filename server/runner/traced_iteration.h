// One traced iteration (timeline.h) of an op or of the layer step, run the way
// OpRun::Timed runs the timed ones: behind the barrier and the launch gate,
// with the heat head start. Shared by the job runner and the layer step.
#pragma once

#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "server/ops/op_context.h"
#include "server/runner/op_measurement.h"
#include "server/runner/op_run.h"
#include "server/runner/timeline.h"

namespace overlap::runner {

// Traces every engine call of `contexts` (run.ctx first; the others'
// streams, where they differ from its own, are the lane "side", or "deferred"
// on the deferred lane): the lanes are each rank's compute and comm streams.
// `enqueue` enqueues one iteration and may label spans
// (TimelineEngine::SetLabel). Spans are timed from run.ctx's iteration start
// on each rank. `gated` as OpRun::Timed's.
absl::StatusOr<Timeline> TraceIteration(
    OpRun& run, const std::vector<ops::OpContext*>& contexts,
    absl::FunctionRef<absl::Status(TimelineEngine&)> enqueue, bool gated = true);

// Per rank 0..ranks-1: from its iteration start to its last span's end, the
// time its compute stream ran nothing.
std::vector<double> ComputeWaitByRank(const Timeline& timeline, int ranks);

}  // namespace overlap::runner
