#include "server/sessions/piece_graphs.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace overlap::sessions {

PieceGraphs::PieceGraphs(engine::Engine& engine, engine::GraphCapture& graphs,
                         engine::StreamId origin, int device, int pieces, std::string name)
    : engine_(engine),
      graphs_(graphs),
      origin_(origin),
      device_(device),
      name_(std::move(name)),
      pieces_(static_cast<size_t>(std::max(pieces, 1))) {}

PieceGraphs::~PieceGraphs() {
  for (Piece& piece : pieces_) {
    if (piece.graph >= 0) graphs_.DestroyGraph(piece.graph);
    for (engine::EventId event : piece.before) engine_.DestroyEvent(event);
  }
  if (launched_ != engine::kNoEvent) engine_.DestroyEvent(launched_);
}

bool PieceGraphs::Eligible(const engine::Engine& engine, const ops::OpContext& ctx) {
  if (engine.Graphs() == nullptr) return false;
  const std::vector<int> devices = ctx.devices();
  return std::set<int>(devices.begin(), devices.end()).size() == 1;
}

absl::StatusOr<bool> PieceGraphs::Run(int index, const std::function<absl::Status()>& enqueue) {
  if (index < 0 || static_cast<size_t>(index) >= pieces_.size()) {
    return absl::InternalError(absl::StrCat(name_, ": piece ", index, " of ", pieces_.size()));
  }
  Piece& piece = pieces_[index];
  // The first run chooses the GEMMs' algorithms, which a capture refuses.
  if (piece.direct || piece.runs++ == 0) {
    ++direct_;
    RETURN_IF_ERROR(enqueue());
    return false;
  }
  if (piece.graph < 0) {
    const absl::Status captured = Capture(piece, enqueue);
    if (!captured.ok()) {
      piece.direct = true;
      GetLogger("sessions")->warn("{} (piece {}): not replayed as a graph, enqueued directly: {}",
                                  name_, index, captured.ToString());
      ++direct_;
      RETURN_IF_ERROR(enqueue());
      return false;
    }
  }
  RETURN_IF_ERROR(Launch(piece));
  return true;
}

absl::Status PieceGraphs::Capture(Piece& piece, const std::function<absl::Status()>& enqueue) {
  RETURN_IF_ERROR(graphs_.BeginCapture(origin_));
  absl::Status recorded = enqueue();
  absl::StatusOr<std::vector<engine::StreamId>> joined =
      recorded.ok() ? graphs_.JoinedStreams(origin_)
                    : absl::StatusOr<std::vector<engine::StreamId>>(recorded);
  // Ended whatever happened, or the streams stay in the capture.
  absl::StatusOr<engine::GraphId> graph = graphs_.EndCapture(origin_);
  if (!joined.ok() || !graph.ok()) {
    if (graph.ok()) graphs_.DestroyGraph(*graph);
    return joined.ok() ? graph.status() : joined.status();
  }
  piece.graph = *graph;
  piece.joined = std::move(*joined);
  for (size_t i = 0; i < piece.joined.size(); ++i) {
    ASSIGN_OR_RETURN(piece.before.emplace_back(), engine_.CreateEvent(device_));
  }
  if (launched_ == engine::kNoEvent && !piece.joined.empty()) {
    ASSIGN_OR_RETURN(launched_, engine_.CreateEvent(device_));
  }
  return absl::OkStatus();
}

absl::Status PieceGraphs::Launch(Piece& piece) {
  // A wait refers to the latest record before it, so one event per stream
  // serves every launch.
  for (size_t i = 0; i < piece.joined.size(); ++i) {
    RETURN_IF_ERROR(engine_.RecordEvent(piece.before[i], piece.joined[i]));
    RETURN_IF_ERROR(engine_.WaitEvent(origin_, piece.before[i]));
  }
  RETURN_IF_ERROR(graphs_.LaunchGraph(piece.graph, origin_));
  if (!piece.joined.empty()) {
    RETURN_IF_ERROR(engine_.RecordEvent(launched_, origin_));
    for (engine::StreamId stream : piece.joined) {
      RETURN_IF_ERROR(engine_.WaitEvent(stream, launched_));
    }
  }
  ++launches_;
  return absl::OkStatus();
}

}  // namespace overlap::sessions
