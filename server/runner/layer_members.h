// The layer step's members (layer_step.h): each planned op of the step with
// its context, and what enqueues them; shared by the planned step
// (layer_step.cc) and the run-time dispatched one (dynamic_step.cc). Internal
// to the runner.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/graph.h"
#include "server/ops/layer_ops.h"
#include "server/ops/op_context.h"
#include "server/runner/layer_plan.h"

namespace overlap::runner {

using ops::OpContext;
using ops::Schedule;

// A planned op (layer_plan.h) as the step runs it.
struct Member : PlannedOp {
  std::unique_ptr<OpContext> ctx;
  size_t sent = 0;  // the pieces (or whole op) enqueued this iteration
  // The member whose output is this one's input (OpSpec::input); null: seeded inputs.
  const Member* input_from = nullptr;
};

// Member m's input made from its producer's output on m's compute streams
// (a no-op for a member with seeded inputs).
absl::Status EnqueueWiredInput(Member& m);

// Each device's main compute stream: the layer step's main streams, which
// every op of a mesh reaches through its rank on that device.
using MainStreams = std::map<int, engine::StreamId>;
MainStreams MainStreamsOf(OpContext& main);

// Deferred member `m` sends its next piece, or the whole op: its side streams
// wait for the main streams to get here first.
absl::Status SendDeferred(Member& m, const MainStreams& main);

// Whether `m` has pieces (or its whole op) not yet sent this iteration.
bool Unsent(const Member& m);

// The main streams wait for the deferred ops that join before `id` ("" = the
// end), each first sending what it has not sent yet.
absl::Status JoinBefore(std::vector<Member>& members, const std::string& id,
                        const MainStreams& main);

}  // namespace overlap::runner
