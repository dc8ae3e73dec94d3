// PieceGraphs: a session op's pieces (the whole op, or a deferred all_reduce's
// chunks) replayed as CUDA graphs, so that a command's enqueue is one graph
// launch instead of a cuBLASLt call per GEMM and a call per kernel, copy and
// event of the op (issue 56: a rank's call to the daemon's enqueue).
//
// A piece runs directly the first time (its GEMMs choose their algorithms
// then, which synchronizes and cannot be captured), is captured at its second
// run from its first rank's stream, and replayed from then on. The work of a
// session's op is the same at every step: the client registered its tensors
// once, the op's context holds the rest.
//
// The lanes share streams among sessions and jobs, and a replay runs the part
// a capture recorded from a stream other than the launch stream (a comm
// stream the op forked to) as graph nodes, out of that stream's order. So
// each launch first makes the launch stream wait for what is queued on those
// streams, and afterwards makes them wait for the graph: every stream the
// piece touched sees it where a direct enqueue would have put it.
//
// A capture that fails (a call the capture refuses, an unjoined stream) is
// logged once and the piece enqueues directly for the session's life. Only
// ops whose ranks all sit on one engine device are replayed (Eligible; with
// ranks_per_gpu each rank is a device of its own): a capture across devices
// would put collectives of shared NCCL communicators in a graph, which has
// not run on two GPUs.
//
// Thread safety: none; the lanes' thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/engine/engine.h"
#include "server/ops/op_context.h"

namespace overlap::sessions {

class PieceGraphs {
 public:
  // `origin`: the op's first rank's compute stream (of `device`), where its
  // pieces are captured and launched. `pieces`: how many the op runs as (1 for
  // a whole op).
  PieceGraphs(engine::Engine& engine, engine::GraphCapture& graphs, engine::StreamId origin,
              int device, int pieces, std::string name);
  ~PieceGraphs();  // destroys the graphs and events (a queued launch still runs)
  PieceGraphs(const PieceGraphs&) = delete;
  PieceGraphs& operator=(const PieceGraphs&) = delete;

  // Whether `ctx`'s ranks all sit on one device and `engine` replays graphs.
  static bool Eligible(const engine::Engine& engine, const ops::OpContext& ctx);

  // Enqueues piece `piece` (< pieces) on the op's streams: `enqueue` itself
  // (first run, or the piece went direct), or a replay of it; true for a
  // replay. `enqueue` must start and end on the op's first rank's compute
  // stream (as the layer ops do on every rank's) and enqueue the same work at
  // every call.
  absl::StatusOr<bool> Run(int piece, const std::function<absl::Status()>& enqueue);

  int64_t launches() const { return launches_; }  // replays enqueued
  int64_t direct() const { return direct_; }      // direct enqueues

 private:
  struct Piece {
    int runs = 0;
    engine::GraphId graph = -1;
    bool direct = false;                  // capture failed: always enqueue directly
    std::vector<engine::StreamId> joined;  // the streams its capture recorded from
    std::vector<engine::EventId> before;   // by joined stream: its queue, before the launch
  };

  absl::Status Capture(Piece& piece, const std::function<absl::Status()>& enqueue);
  absl::Status Launch(Piece& piece);

  engine::Engine& engine_;
  engine::GraphCapture& graphs_;
  const engine::StreamId origin_;
  const int device_;
  const std::string name_;  // "session sess-000001 op fc1", for the log
  std::vector<Piece> pieces_;
  engine::EventId launched_ = engine::kNoEvent;  // on origin_, after a launch
  int64_t launches_ = 0;
  int64_t direct_ = 0;
};

}  // namespace overlap::sessions
