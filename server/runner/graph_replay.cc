#include "server/runner/graph_replay.h"

#include "common/status_macros.h"

namespace overlap::runner {

using ops::OpContext;

namespace {

absl::Status NoGraphs(OpContext& ctx) {
  return absl::FailedPreconditionError(ctx.engine().Name() +
                                       " engine: no graph replay (or graph_replay is off)");
}

}  // namespace

absl::StatusOr<engine::GraphId> CaptureIteration(OpContext& ctx,
                                                 const std::function<absl::Status()>& enqueue) {
  engine::GraphCapture* graphs = ctx.engine().Graphs();
  if (graphs == nullptr) return NoGraphs(ctx);
  const engine::StreamId origin = ctx.rank(0).compute;
  RETURN_IF_ERROR(graphs->BeginCapture(origin));
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
  absl::StatusOr<engine::GraphId> graph = graphs->EndCapture(origin);
  if (!recorded.ok()) {
    if (graph.ok()) graphs->DestroyGraph(*graph);
    return recorded;
  }
  return graph;
}

absl::Status LaunchIteration(OpContext& ctx, engine::GraphId graph) {
  engine::GraphCapture* graphs = ctx.engine().Graphs();
  if (graphs == nullptr) return NoGraphs(ctx);
  const engine::StreamId origin = ctx.rank(0).compute;
  RETURN_IF_ERROR(graphs->LaunchGraph(graph, origin));
  RETURN_IF_ERROR(ctx.Record(0, origin, ops::EventKind::kGraphDone));
  for (int r = 1; r < ctx.tp(); ++r) {
    RETURN_IF_ERROR(ctx.Wait(ctx.rank(r).compute, 0, ops::EventKind::kGraphDone));
  }
  return absl::OkStatus();
}

}  // namespace overlap::runner
