// The copy-engine all-reduces other than the two-phase direct one
// (collectives.cc): ring, tree and parameter server, out of place. Each rank
// pulls what it needs with peer copies on its own stream and adds it with the
// reduction kernel; cross-rank order is kept with events only, never the host.
//
// What each layout asks of the busiest GPU, for S bytes over N ranks (common/graph.h):
// ring and direct 2(N-1)/N x S in and out; tree up to 3S in and out at an inner
// rank; parameter server (N-1) x S in and out of rank 0. Their figures are
// what `overlapctl commbench --algorithms` measures.
#include "server/ops/all_reduce_p2p.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/schedule.h"

namespace overlap::ops {

using engine::BufferId;
using engine::BufferRef;
using engine::StreamId;

namespace {

// The rows of one piece of every rank's buffers.
struct Rows {
  OpContext& ctx;
  int64_t row, cols;
  BufferRef Of(BufferId buffer, const Piece& piece) const {
    return ctx.Rows(buffer, row + piece.row, piece.rows, cols);
  }
};

absl::Status Pull(OpContext& ctx, StreamId stream, int to, BufferRef dst, int from, BufferRef src) {
  return ctx.engine().PeerCopy(stream, dst, ctx.rank(to).device, src, ctx.rank(from).device);
}

// Pieces a tree or parameter server pipelines over: at least 4, and at least
// tp, so that one piece fits a receive slot (m / tp rows of an all_reduce op).
int PipelinePieces(int64_t rows, int tp) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(rows, std::max(4, tp))));
}

absl::Status CheckSlot(OpContext& ctx, int64_t rows, int pieces, int64_t cols) {
  const int64_t needed = MaxPieceRows(rows, pieces) * cols;
  if (ctx.tp() > 2 && (ctx.rank(0).slots.empty() || needed > ctx.sizes().slots)) {
    return absl::InternalError(absl::StrCat("all-reduce piece of ", needed,
                                            " elements does not fit a receive slot of ",
                                            ctx.sizes().slots));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AllReduceRingP2p(OpContext& ctx, On on, const std::vector<BufferId>& src,
                              const std::vector<BufferId>& dst, int64_t row, int64_t rows,
                              int64_t cols, int tag) {
  const int tp = ctx.tp();
  const Rows at{ctx, row, cols};
  auto part = [&](int p) { return PieceOf(rows, tp, ((p % tp) + tp) % tp); };
  // Step by step over the ranks: a wait names the latest record enqueued
  // before it, so each step's records must be enqueued before the next step's
  // waits.
  for (int s = 0; s + 1 < tp; ++s) {
    for (int r = 0; r < tp; ++r) {
      // Reduce: at step s, part r-1-s becomes the left rank's running sum of
      // it plus ours. Left's sum is its input at step 0, then what it made at
      // step s-1.
      const StreamId stream = StreamOf(ctx, r, on);
      const int left = (r + tp - 1) % tp;
      const Piece p = part(r - 1 - s);
      if (s > 0) RETURN_IF_ERROR(ctx.Wait(stream, left, EventKind::kArRing, tag, s - 1));
      if (p.rows > 0) {
        RETURN_IF_ERROR(
            Pull(ctx, stream, r, at.Of(dst[r], p), left, at.Of(s == 0 ? src[left] : dst[left], p)));
        RETURN_IF_ERROR(ctx.engine().Accumulate(stream, at.Of(dst[r], p), at.Of(src[r], p),
                                                ctx.reduced_dtype()));
      }
      RETURN_IF_ERROR(ctx.Record(r, stream, EventKind::kArRing, tag, s));
    }
  }
  for (int s = 0; s + 1 < tp; ++s) {
    for (int r = 0; r < tp; ++r) {
      // Gather: left's last reduce step left part r whole; each step passes
      // on the part received the step before. Writing part r-s here is safe:
      // the rank to our right read our running sum of it at its reduce step
      // s, which the chain of waits behind left's event orders before us.
      const StreamId stream = StreamOf(ctx, r, on);
      const int left = (r + tp - 1) % tp;
      const Piece p = part(r - s);
      RETURN_IF_ERROR(ctx.Wait(stream, left, EventKind::kArRing, tag, tp - 2 + s));
      if (p.rows > 0) {
        RETURN_IF_ERROR(Pull(ctx, stream, r, at.Of(dst[r], p), left, at.Of(dst[left], p)));
      }
      RETURN_IF_ERROR(ctx.Record(r, stream, EventKind::kArRing, tag, tp - 1 + s));
    }
  }
  return absl::OkStatus();
}

absl::Status AllReduceTreeP2p(OpContext& ctx, On on, const std::vector<BufferId>& src,
                              const std::vector<BufferId>& dst, int64_t row, int64_t rows,
                              int64_t cols, int tag) {
  const int tp = ctx.tp();
  const Rows at{ctx, row, cols};
  const int pieces = PipelinePieces(rows, tp);
  RETURN_IF_ERROR(CheckSlot(ctx, rows, pieces, cols));
  // A binary tree over the ranks, rank 0 at the root: rank r's children are
  // 2r+1 and 2r+2. A leaf's partial sum is its input; an inner rank's is its dst.
  auto is_leaf = [&](int r) { return 2 * r + 1 >= tp; };
  auto partial = [&](int r) { return is_leaf(r) ? src[r] : dst[r]; };
  // Up, piece by piece, so that a parent adds piece c while its children
  // already work on piece c+1; children (higher ranks) are enqueued before
  // their parent, since a wait names the latest record enqueued before it.
  for (int c = 0; c < pieces; ++c) {
    const Piece p = PieceOf(rows, pieces, c);
    for (int r = tp - 1; r >= 0; --r) {
      const StreamId stream = StreamOf(ctx, r, on);
      for (int child = 2 * r + 1, i = 0; child < tp && child <= 2 * r + 2; ++child, ++i) {
        RETURN_IF_ERROR(ctx.Wait(stream, child, EventKind::kArTreeUp, tag, c));
        if (p.rows == 0) continue;
        // The first child's sum lands in our output, the second's in a slot.
        const BufferRef to =
            i == 0 ? at.Of(dst[r], p) : ctx.Rows(ctx.rank(r).slots[0], 0, p.rows, cols);
        RETURN_IF_ERROR(Pull(ctx, stream, r, to, child, at.Of(partial(child), p)));
        RETURN_IF_ERROR(ctx.engine().Accumulate(
            stream, at.Of(dst[r], p), i == 0 ? at.Of(src[r], p) : to, ctx.reduced_dtype()));
      }
      RETURN_IF_ERROR(ctx.Record(r, stream, EventKind::kArTreeUp, tag, c));
    }
  }
  // Down: the root's sum is whole once its up pass is; every other rank pulls
  // each piece from its parent as soon as the parent has it (parents first).
  // The parent's up pass, which read our partial, is behind that event.
  for (int c = 0; c < pieces; ++c) {
    const Piece p = PieceOf(rows, pieces, c);
    for (int r = 0; r < tp; ++r) {
      const StreamId stream = StreamOf(ctx, r, on);
      if (r > 0) {
        const int parent = (r - 1) / 2;
        RETURN_IF_ERROR(ctx.Wait(stream, parent, EventKind::kArTreeDown, tag, c));
        if (p.rows > 0) {
          RETURN_IF_ERROR(Pull(ctx, stream, r, at.Of(dst[r], p), parent, at.Of(dst[parent], p)));
        }
      }
      RETURN_IF_ERROR(ctx.Record(r, stream, EventKind::kArTreeDown, tag, c));
    }
  }
  return absl::OkStatus();
}

absl::Status AllReduceParameterServerP2p(OpContext& ctx, On on, const std::vector<BufferId>& src,
                                         const std::vector<BufferId>& dst, int64_t row,
                                         int64_t rows, int64_t cols, int tag) {
  const int tp = ctx.tp();
  const Rows at{ctx, row, cols};
  const int pieces = PipelinePieces(rows, tp);
  RETURN_IF_ERROR(CheckSlot(ctx, rows, pieces, cols));
  // Rank 0 pulls every input and sums it, piece by piece; the others pull each
  // summed piece from it as soon as it is there.
  const StreamId server = StreamOf(ctx, 0, on);
  for (int c = 0; c < pieces; ++c) {
    const Piece p = PieceOf(rows, pieces, c);
    for (int q = 1; q < tp && p.rows > 0; ++q) {
      const BufferRef to =
          q == 1 ? at.Of(dst[0], p) : ctx.Rows(ctx.rank(0).slots[0], 0, p.rows, cols);
      RETURN_IF_ERROR(Pull(ctx, server, 0, to, q, at.Of(src[q], p)));
      RETURN_IF_ERROR(ctx.engine().Accumulate(server, at.Of(dst[0], p),
                                              q == 1 ? at.Of(src[0], p) : to, ctx.reduced_dtype()));
    }
    RETURN_IF_ERROR(ctx.Record(0, server, EventKind::kArPs, tag, c));
  }
  for (int q = 1; q < tp; ++q) {
    const StreamId stream = StreamOf(ctx, q, on);
    for (int c = 0; c < pieces; ++c) {
      const Piece p = PieceOf(rows, pieces, c);
      RETURN_IF_ERROR(ctx.Wait(stream, 0, EventKind::kArPs, tag, c));
      if (p.rows > 0) RETURN_IF_ERROR(Pull(ctx, stream, q, at.Of(dst[q], p), 0, at.Of(dst[0], p)));
    }
  }
  return absl::OkStatus();
}

}  // namespace overlap::ops
