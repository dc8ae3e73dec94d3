// Steady-state replay of one iteration of an op as a graph: recorded once from
// rank 0's compute stream (the other ranks' streams join it through events) and
// launched there each iteration. It takes the host out of the loop (one launch
// instead of hundreds of calls) and lets the GPUs chain the iteration's
// cross-stream and cross-device dependencies themselves.
#pragma once

#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/ops/op_context.h"

namespace overlap::runner {

// Records `enqueue` (which starts and ends on every rank's compute stream, as
// the layer ops do) into a graph. Nothing runs. The GEMM algorithms must have
// been chosen already (an earlier direct iteration): choosing one synchronises,
// which a capture refuses.
absl::StatusOr<engine::GraphId> CaptureIteration(ops::OpContext& ctx,
                                                 const std::function<absl::Status()>& enqueue);

// Enqueues one replay: rank 0's compute stream launches the graph; the other
// ranks' compute streams wait for it to finish. A graph is done on its launch
// stream only once every device's part is done. Its start waits only for what
// came before on rank 0's stream: the caller orders the other ranks' earlier
// work before it (the timed iterations' barrier does, or a synchronize).
absl::Status LaunchIteration(ops::OpContext& ctx, engine::GraphId graph);

}  // namespace overlap::runner
