// GraphCapture: steady-state replay (CUDA graphs), the part of an engine that
// records enqueued work once and launches it again as one unit. An engine
// without it (the host backend, graph_replay: false, a spanning or timeline
// engine) answers null to Engine::Graphs(), and callers enqueue directly.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/engine/engine_types.h"

namespace overlap::engine {

class GraphCapture {
 public:
  virtual ~GraphCapture() = default;

  // Between BeginCapture and EndCapture, work enqueued on `origin`, and on
  // every stream that joins it by waiting on an event recorded there (of any
  // device), is recorded instead of run; each joined stream must be joined
  // back into `origin` before EndCapture. A call that fails inside the capture
  // spoils it: EndCapture must still be called, and then fails.
  virtual absl::Status BeginCapture(StreamId origin) = 0;
  // Before EndCapture: the streams other than `origin` (of any device) that
  // the capture has recorded work from so far, in stream order. A replay runs
  // their part as graph nodes, not in those streams' order: a caller that
  // shares them with other work orders it around the launch.
  virtual absl::StatusOr<std::vector<StreamId>> JoinedStreams(StreamId origin) = 0;
  virtual absl::StatusOr<GraphId> EndCapture(StreamId origin) = 0;
  // Runs the recorded work once, after what is queued on `stream` (of origin's
  // device), and later work on `stream` waits for all of it.
  virtual absl::Status LaunchGraph(GraphId graph, StreamId stream) = 0;
  virtual void DestroyGraph(GraphId graph) = 0;
};

}  // namespace overlap::engine
