// The layer step: after every op of a job ran alone, the whole graph runs as
// one timed step, so that a user sees what a layer costs with its ops back to
// back and not only their sum.
//
// The ops run in dependency order on the main streams with the schedules
// their own runs chose, except the collectives alone that no op waits on (a
// data-parallel gradient all-reduce, typically): those are deferred, run on
// each rank's second comm stream (communicator channel 1) beside the ops that
// follow them, and joined back into the main streams by the end of the step,
// the bound they may be deferred to. Deferred all-reduces over one transport
// are merged into buckets of up to JobSpec::bucket_mib, each fired where its
// last member ran, as PyTorch DDP buckets gradients. The step is timed as an op's steps are
// (barrier, launch gate, heat head start, max over ranks, graph replay where
// no schedule uses NCCL) and, with verify, every op's output is checked again
// against float64 after a layer iteration.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "common/graph.h"
#include "overlap/v1/overlap.pb.h"
#include "server/engine/engine.h"
#include "server/ops/job_runner.h"

namespace overlap::ops {

// `order` is the topological order the ops ran in and `result` holds their
// results in that order; sets result's layer_step and layer_deferred, or
// layer_note when the step cannot be measured (one op; the buffers of every op
// do not fit at once). Errors as RunJob's.
absl::Status TimeLayerStep(engine::Engine& engine, const JobSpec& spec,
                           const std::vector<int>& devices, const RunHooks& hooks,
                           const std::vector<int>& order, v1::JobResult* result);

}  // namespace overlap::ops
