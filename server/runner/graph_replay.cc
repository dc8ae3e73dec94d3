#include "server/runner/graph_replay.h"

#include "common/status_macros.h"

namespace overlap::runner {

using ops::OpContext;

absl::StatusOr<engine::GraphId> CaptureIteration(OpContext& ctx,
                                                 const std::function<absl::Status()>& enqueue) {
  const engine::StreamId origin = ctx.rank(0).compute;
  RETURN_IF_ERROR(ctx.engine().BeginCapture(origin));
  auto record = [&]() -> absl::Status {
    RETURN_IF_ERROR(ctx.Record(0, origin, ops::EventKind::kCaptureFork));
    for (int r = 1; r < ctx.tp(); ++r) {
      RETURN_IF_ERROR(ctx.Wait(ctx.rank(r).compute, 0, ops::EventKind::kCaptureFork));
    }
    RETURN_IF_ERROR(enqueue());
    for (int r = 1; r < ctx.tp(); ++r) {
      RETURN_IF_ERROR(ctx.Record(r, ctx.rank(r).compute, ops::EventKind::kCaptureJoin));
      RETURN_IF_ERROR(ctx.Wait(origin, r, ops::EventKind::kCaptureJoin));
    }
    return absl::OkStatus();
  };
  const absl::Status recorded = record();
  // The capture is ended whatever happened, or the streams stay in it.
  absl::StatusOr<engine::GraphId> graph = ctx.engine().EndCapture(origin);
  if (!recorded.ok()) {
    if (graph.ok()) ctx.engine().DestroyGraph(*graph);
    return recorded;
  }
  return graph;
}

absl::Status LaunchIteration(OpContext& ctx, engine::GraphId graph) {
  const engine::StreamId origin = ctx.rank(0).compute;
  RETURN_IF_ERROR(ctx.engine().LaunchGraph(graph, origin));
  RETURN_IF_ERROR(ctx.Record(0, origin, ops::EventKind::kGraphDone));
  for (int r = 1; r < ctx.tp(); ++r) {
    RETURN_IF_ERROR(ctx.Wait(ctx.rank(r).compute, 0, ops::EventKind::kGraphDone));
  }
  return absl::OkStatus();
}

}  // namespace overlap::runner
