// GEMM+AR (row-parallel without sequence parallelism): rank r holds A[m, k/tp]
// and W[k/tp, n]; every rank ends with Y[m, n] = sum over ranks of A x W.
#include "common/status_macros.h"
#include "server/ops/collectives.h"
#include "server/ops/layer_ops.h"

namespace overlap::ops {
namespace {

std::vector<engine::BufferId> Outputs(OpContext& ctx) {
  std::vector<engine::BufferId> out;
  for (int r = 0; r < ctx.tp(); ++r) out.push_back(ctx.rank(r).y);
  return out;
}

// GEMM rows [row, row + rows) into Y on every rank, then all-reduce them on the
// stream `on`. The comm stream (or, for p2p, every rank's) waits for the GEMMs.
absl::Status GemmThenAllReduce(OpContext& ctx, Transport transport, On on, int64_t row,
                               int64_t rows, int index) {
  const int tp = ctx.tp();
  for (int r = 0; r < tp; ++r) {
    RankState& rs = ctx.rank(r);
    RETURN_IF_ERROR(GemmRows(ctx, r, rs.compute, rs.a, row, rs.y, row, rows));
    RETURN_IF_ERROR(ctx.Record(r, rs.compute, EventKind::kGemm, index));
  }
  for (int r = 0; r < tp; ++r) {
    const engine::StreamId stream = StreamOf(ctx, r, on);
    if (transport == Transport::kP2p) {
      RETURN_IF_ERROR(ctx.WaitAll(stream, EventKind::kGemm, index));
    } else if (on == On::kComm) {
      RETURN_IF_ERROR(ctx.Wait(stream, r, EventKind::kGemm, index));
    }
  }
  return AllReduceRows(ctx, transport, on, Outputs(ctx), row, rows, ctx.op().n, index);
}

// The first tp-1 row blocks are all-reduced in one collective while the last
// block's GEMM runs; the last block's all-reduce follows.
absl::Status Bulk(OpContext& ctx, Transport transport) {
  const int64_t mr = ctx.op().m / ctx.tp();
  const int64_t head = (ctx.tp() - 1) * mr;
  RETURN_IF_ERROR(ctx.ForkComm(transport));
  RETURN_IF_ERROR(GemmThenAllReduce(ctx, transport, On::kComm, 0, head, 0));
  RETURN_IF_ERROR(GemmThenAllReduce(ctx, transport, On::kComm, head, mr, 1));
  return ctx.JoinComm();
}

absl::Status Chunked(OpContext& ctx, Transport transport, int chunks) {
  RETURN_IF_ERROR(ctx.ForkComm(transport));
  for (int c = 0; c < chunks; ++c) {
    const Piece piece = PieceOf(ctx.op().m, chunks, c);
    RETURN_IF_ERROR(GemmThenAllReduce(ctx, transport, On::kComm, piece.row, piece.rows, c));
  }
  return ctx.JoinComm();
}

// The fused ring reduce-scatter leaves each rank's own block reduced in its Y,
// piece by piece; every peer pulls (or is sent) each reduced piece as soon as
// its GEMM is done, so only the last piece's all-gather follows the last GEMM.
// Peers' partials live in Y itself, in the rows their reduced block overwrites
// (over kDirect, peers store their partials of our block into our own rows).
absl::Status Ring(OpContext& ctx, Transport transport, int chunks) {
  const int tp = ctx.tp();
  const int64_t mr = ctx.op().m / tp, n = ctx.op().n;
  RETURN_IF_ERROR(ctx.ForkComm(transport));
  const std::vector<engine::BufferId> y = Outputs(ctx);  // partials and results share Y
  RETURN_IF_ERROR(RingReduceScatter(ctx, transport, chunks, y, y, /*out_row_is_block=*/true));
  // Direct stores only fuse the reduce-scatter: a reduced piece is needed on
  // both ranks, and a GEMM stores to one place, so copy engines gather them.
  if (transport == Transport::kDirect) transport = Transport::kP2p;
  for (int c = 0; c < chunks; ++c) {
    // A pull must wait for the owner's reduced piece, which comes after the
    // owner has pulled our partial out of the same rows.
    for (int r = 0; r < tp; ++r) {
      RETURN_IF_ERROR(WaitForProducers(ctx, r, ctx.rank(r).comm, transport, EventKind::kReduced, c));
    }
    const Piece piece = PieceOf(mr, chunks, c);
    for (int s = 1; s < tp; ++s) {
      std::vector<RankTransfer> step;
      for (int q = 0; q < tp; ++q) {
        const int r = (q + s) % tp;
        const int64_t row = q * mr + piece.row;
        step.push_back(RankTransfer{q, ctx.Rows(ctx.rank(q).y, row, piece.rows, n), r,
                                    ctx.Rows(ctx.rank(r).y, row, piece.rows, n)});
      }
      RETURN_IF_ERROR(Exchange(ctx, transport, step));
    }
  }
  return ctx.JoinComm();
}

absl::Status Serial(OpContext& ctx, Transport transport) {
  return GemmThenAllReduce(ctx, transport, On::kCompute, 0, ctx.op().m, 0);
}

}  // namespace

absl::Status EnqueueGemmAr(OpContext& ctx, const Schedule& s) {
  return EnqueueByMode(ctx, s, {"gemm_ar", Serial, Bulk, Chunked, Ring});
}

}  // namespace overlap::ops
