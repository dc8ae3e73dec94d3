// AG+GEMM (column-parallel with sequence parallelism): rank r holds A[m/tp, k]
// and W[k, n/tp]; Y[m, n/tp] = AllGather_m(A) x W, rows in global order.
#include "common/status_macros.h"
#include "server/ops/collectives.h"
#include "server/ops/layer_ops.h"

namespace overlap::ops {
namespace {

using engine::BufferRef;

absl::Status Serial(OpContext& ctx, Transport transport) {
  const int tp = ctx.tp();
  const LocalShapes& sh = ctx.shapes();
  if (tp == 1) return EnqueueGemmAlone(ctx);  // nothing to gather: A is the whole input
  std::vector<BufferRef> src, dst;
  for (int r = 0; r < tp; ++r) {
    src.push_back(ctx.Rows(ctx.rank(r).a, 0, sh.a_rows, sh.a_cols));
    dst.push_back(ctx.Rows(ctx.rank(r).full, 0, ctx.op().m, sh.a_cols));
  }
  RETURN_IF_ERROR(AllGather(ctx, transport, On::kCompute, src, dst));
  for (int r = 0; r < tp; ++r) {
    RETURN_IF_ERROR(
        GemmRows(ctx, r, ctx.rank(r).compute, ctx.rank(r).full, 0, ctx.rank(r).y, 0, ctx.op().m));
  }
  return absl::OkStatus();
}

// One all-gather of everything on the comm stream while the local shard's rows
// are computed from A directly; the other shards' rows follow once it lands.
absl::Status Bulk(OpContext& ctx, Transport transport) {
  const int tp = ctx.tp();
  const LocalShapes& sh = ctx.shapes();
  const int64_t mr = sh.a_rows;
  RETURN_IF_ERROR(ctx.ForkComm(transport));
  std::vector<BufferRef> src, dst;
  for (int r = 0; r < tp; ++r) {
    src.push_back(ctx.Rows(ctx.rank(r).a, 0, mr, sh.a_cols));
    dst.push_back(ctx.Rows(ctx.rank(r).full, 0, ctx.op().m, sh.a_cols));
  }
  // The local rows come from A itself: p2p need not copy them into `full` first.
  RETURN_IF_ERROR(AllGather(ctx, transport, On::kComm, src, dst, OwnBlock::kNotNeeded));
  for (int r = 0; r < tp; ++r) {
    RankState& rs = ctx.rank(r);
    RETURN_IF_ERROR(ctx.Record(r, rs.comm, EventKind::kGathered));
    RETURN_IF_ERROR(GemmRows(ctx, r, rs.compute, rs.a, 0, rs.y, r * mr, mr));
    RETURN_IF_ERROR(ctx.Wait(rs.compute, r, EventKind::kGathered));
    if (r > 0) RETURN_IF_ERROR(GemmRows(ctx, r, rs.compute, rs.full, 0, rs.y, 0, r * mr));
    if (r < tp - 1) {
      RETURN_IF_ERROR(GemmRows(ctx, r, rs.compute, rs.full, (r + 1) * mr, rs.y, (r + 1) * mr,
                               (tp - 1 - r) * mr));
    }
  }
  return ctx.JoinComm();
}

// Chunk c of every rank is gathered into ping-pong buffer c % 2 (rank-major),
// one chunk ahead of the GEMM; one batched GEMM per chunk writes each rank's
// rows back to their global positions, so the row order is the serial one.
absl::Status Chunked(OpContext& ctx, Transport transport, int chunks) {
  const int tp = ctx.tp();
  const LocalShapes& sh = ctx.shapes();
  const int64_t mr = sh.a_rows, k = sh.a_cols;
  RETURN_IF_ERROR(ctx.ForkComm(transport));
  for (int c = 0; c < chunks; ++c) {
    const int p = c % 2;
    const auto [row, rc] = PieceOf(mr, chunks, c);
    std::vector<BufferRef> src, dst;
    for (int r = 0; r < tp; ++r) {
      if (c >= 2) RETURN_IF_ERROR(ctx.Wait(ctx.rank(r).comm, r, EventKind::kGemm, c - 2));
      src.push_back(ctx.Rows(ctx.rank(r).a, row, rc, k));
      dst.push_back(ctx.Rows(ctx.rank(r).pingpong[p], 0, tp * rc, k));
    }
    RETURN_IF_ERROR(AllGather(ctx, transport, On::kComm, src, dst));
    for (int r = 0; r < tp; ++r) {
      RankState& rs = ctx.rank(r);
      RETURN_IF_ERROR(ctx.Record(r, rs.comm, EventKind::kGathered, c));
      RETURN_IF_ERROR(ctx.Wait(rs.compute, r, EventKind::kGathered, c));
      RETURN_IF_ERROR(
          BatchedGemmRows(ctx, r, rs.compute, {rs.pingpong[p], 0, rc}, {rs.y, row, mr}, rc));
      RETURN_IF_ERROR(ctx.Record(r, rs.compute, EventKind::kGemm, c));
    }
  }
  return ctx.JoinComm();
}

// Local shard first; each peer's shard is exchanged straight into its rows of
// the gathered buffer, in `chunks` pieces, and each piece's GEMM starts as soon
// as it lands, so only the last piece's transfer can stand between GEMMs.
absl::Status Ring(OpContext& ctx, Transport transport, int chunks) {
  const int tp = ctx.tp();
  const int64_t mr = ctx.shapes().a_rows, k = ctx.shapes().a_cols;
  RETURN_IF_ERROR(ctx.ForkComm(transport));
  for (int r = 0; r < tp; ++r) {
    RankState& rs = ctx.rank(r);
    RETURN_IF_ERROR(GemmRows(ctx, r, rs.compute, rs.a, 0, rs.y, r * mr, mr));
  }
  for (int s = 1; s < tp; ++s) {
    for (int c = 0; c < chunks; ++c) {
      const int index = s * chunks + c;
      const auto [piece_row, rc] = PieceOf(mr, chunks, c);
      std::vector<RankTransfer> step;
      for (int r = 0; r < tp; ++r) {
        const int q = (r + s) % tp;
        step.push_back(RankTransfer{q, ctx.Rows(ctx.rank(q).a, piece_row, rc, k), r,
                                    ctx.Rows(ctx.rank(r).full, q * mr + piece_row, rc, k)});
      }
      RETURN_IF_ERROR(Exchange(ctx, transport, step));
      for (int r = 0; r < tp; ++r) {
        RankState& rs = ctx.rank(r);
        const int64_t row = ((r + s) % tp) * mr + piece_row;
        RETURN_IF_ERROR(ctx.Record(r, rs.comm, EventKind::kArrived, index));
        RETURN_IF_ERROR(ctx.Wait(rs.compute, r, EventKind::kArrived, index));
        RETURN_IF_ERROR(GemmRows(ctx, r, rs.compute, rs.full, row, rs.y, row, rc));
      }
    }
  }
  return ctx.JoinComm();
}

}  // namespace

absl::Status EnqueueAgGemm(OpContext& ctx, const Schedule& s) {
  return EnqueueByMode(ctx, s, {"ag_gemm", Serial, Bulk, Chunked, Ring});
}

}  // namespace overlap::ops
