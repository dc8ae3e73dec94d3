// GEMM+RS (row-parallel with sequence parallelism): rank r holds A[m, k/tp] and
// W[k/tp, n]; its partial P = A x W [m, n] is reduce-scattered along m, so rank r
// ends with Y[m/tp, n] = sum over ranks of rows [r*m/tp, (r+1)*m/tp) of P.
#include <optional>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "server/ops/collectives.h"
#include "server/ops/layer_ops.h"

namespace overlap::ops {
namespace {

using engine::BufferRef;

absl::Status Serial(OpContext& ctx, Transport transport) {
  const int tp = ctx.tp();
  const int64_t m = ctx.op().m, n = ctx.op().n, mr = m / tp;
  if (tp == 1) return EnqueueGemmAlone(ctx);  // nothing to reduce: the partial is Y
  std::vector<BufferRef> src, dst;
  for (int r = 0; r < tp; ++r) {
    RankState& rs = ctx.rank(r);
    RETURN_IF_ERROR(GemmRows(ctx, r, rs.compute, rs.a, 0, rs.full, 0, m));
    RETURN_IF_ERROR(ctx.Record(r, rs.compute, EventKind::kGemm));
    src.push_back(ctx.Rows(rs.full, 0, m, n));
    dst.push_back(ctx.Rows(rs.y, 0, mr, n));
  }
  if (transport == Transport::kP2p) {
    for (int r = 0; r < tp; ++r)
      RETURN_IF_ERROR(ctx.WaitAll(ctx.rank(r).compute, EventKind::kGemm));
  }
  return ReduceScatter(ctx, transport, On::kCompute, src, dst);
}

// The peers' rows first; their exchange (one group) runs on the comm stream
// while the local rows are computed straight into Y; the arrivals are added last.
absl::Status Bulk(OpContext& ctx, Transport transport) {
  const int tp = ctx.tp();
  const int64_t m = ctx.op().m, n = ctx.op().n, mr = m / tp;
  RETURN_IF_ERROR(ctx.ForkComm(transport));
  for (int r = 0; r < tp; ++r) {
    RankState& rs = ctx.rank(r);
    if (r > 0) RETURN_IF_ERROR(GemmRows(ctx, r, rs.compute, rs.a, 0, rs.full, 0, r * mr));
    if (r < tp - 1) {
      RETURN_IF_ERROR(GemmRows(ctx, r, rs.compute, rs.a, (r + 1) * mr, rs.full, (r + 1) * mr,
                               (tp - 1 - r) * mr));
    }
    RETURN_IF_ERROR(ctx.Record(r, rs.compute, EventKind::kGemm));
  }
  std::vector<RankTransfer> step;
  for (int r = 0; r < tp; ++r) {
    RETURN_IF_ERROR(WaitForProducers(ctx, r, ctx.rank(r).comm, transport, EventKind::kGemm, 0));
    for (int i = 1; i < tp; ++i) {
      const int q = (r + i) % tp;  // rank r receives its rows of q's partial in slot i-1
      step.push_back(RankTransfer{q, ctx.Rows(ctx.rank(q).full, r * mr, mr, n), r,
                                  ctx.Rows(ctx.rank(r).slots[i - 1], 0, mr, n)});
    }
  }
  RETURN_IF_ERROR(Exchange(ctx, transport, step));
  for (int r = 0; r < tp; ++r) {
    RankState& rs = ctx.rank(r);
    RETURN_IF_ERROR(ctx.Record(r, rs.comm, EventKind::kReceived));
    RETURN_IF_ERROR(GemmRows(ctx, r, rs.compute, rs.a, r * mr, rs.y, 0, mr));
    RETURN_IF_ERROR(ctx.Wait(rs.compute, r, EventKind::kReceived));
    for (int i = 1; i < tp; ++i) {
      RETURN_IF_ERROR(ctx.engine().Accumulate(rs.compute, ctx.Rows(rs.y, 0, mr, n),
                                              ctx.Rows(rs.slots[i - 1], 0, mr, n),
                                              ctx.reduced_dtype()));
    }
  }
  return ctx.JoinComm();
}

// Chunk c: one batched GEMM computes, for every destination rank j, the rows
// of piece c of block j of the partial into ping-pong buffer c % 2 (destination
// major); the comm stream reduce-scatters it into piece c's rows of Y while the
// next chunk's GEMM runs.
absl::Status Chunked(OpContext& ctx, Transport transport, int chunks) {
  const int tp = ctx.tp();
  const int64_t m = ctx.op().m, n = ctx.op().n, mr = m / tp;
  RETURN_IF_ERROR(ctx.ForkComm(transport));
  for (int c = 0; c < chunks; ++c) {
    const auto [row, rc] = PieceOf(mr, chunks, c);
    std::vector<BufferRef> src, dst;
    for (int r = 0; r < tp; ++r) {
      RankState& rs = ctx.rank(r);
      const engine::BufferId pingpong = rs.pingpong[c % 2];
      // The reduce-scatter of chunk c-2 (every peer's pulls, for p2p) must be
      // done with this ping-pong buffer before the GEMM overwrites it.
      if (c >= 2)
        RETURN_IF_ERROR(WaitForProducers(ctx, r, rs.compute, transport, EventKind::kRs, c - 2));
      RETURN_IF_ERROR(BatchedGemmRows(ctx, r, rs.compute, {rs.a, row, mr}, {pingpong, 0, rc}, rc));
      RETURN_IF_ERROR(ctx.Record(r, rs.compute, EventKind::kGemm, c));
      src.push_back(ctx.Rows(pingpong, 0, tp * rc, n));
      dst.push_back(ctx.Rows(rs.y, row, rc, n));
    }
    for (int r = 0; r < tp; ++r) {
      RETURN_IF_ERROR(WaitForProducers(ctx, r, ctx.rank(r).comm, transport, EventKind::kGemm, c));
    }
    RETURN_IF_ERROR(ReduceScatter(ctx, transport, On::kComm, src, dst));
    for (int r = 0; r < tp; ++r)
      RETURN_IF_ERROR(ctx.Record(r, ctx.rank(r).comm, EventKind::kRs, c));
  }
  return ctx.JoinComm();
}

// The fused ring reduce-scatter: peers' blocks of the partial go through the
// full buffer, the own block lands in Y.
absl::Status Ring(OpContext& ctx, Transport transport, int chunks) {
  std::vector<engine::BufferId> partial, out;
  for (int r = 0; r < ctx.tp(); ++r) {
    partial.push_back(ctx.rank(r).full);
    out.push_back(ctx.rank(r).y);
  }
  RETURN_IF_ERROR(ctx.ForkComm(transport));
  RETURN_IF_ERROR(
      RingReduceScatter(ctx, transport, chunks, partial, out, /*out_row_is_block=*/false));
  return ctx.JoinComm();
}

// Each rank computes its own block with beta = 1 on top of what arrived (no
// reduction kernel after the last GEMM), in `chunks` pieces; piece c first
// waits for the rank's own event (arrived, c) where `arrived` is given, and
// records (reduced, c) after.
absl::Status OwnBlockOnArrivals(OpContext& ctx, int chunks,
                                const std::vector<engine::BufferId>& out, bool out_row_is_block,
                                std::optional<EventKind> arrived) {
  const int tp = ctx.tp();
  const int64_t mr = ctx.op().m / tp;
  for (int c = 0; c < chunks; ++c) {
    const Piece piece = PieceOf(mr, chunks, c);
    for (int r = 0; r < tp; ++r) {
      RankState& rs = ctx.rank(r);
      if (arrived) RETURN_IF_ERROR(ctx.Wait(rs.compute, r, *arrived, c));
      const int64_t row = (out_row_is_block ? r * mr : 0) + piece.row;
      RETURN_IF_ERROR(GemmRows(ctx, r, rs.compute, rs.a, r * mr + piece.row, out[r], row,
                               piece.rows, /*beta=*/1.0f));
      RETURN_IF_ERROR(ctx.Record(r, rs.compute, EventKind::kReduced, c));
    }
  }
  return absl::OkStatus();
}

// Over kDirect: rank r's GEMM for owner d's block stores straight into d's
// memory, the first writer (step 1) into d's output rows and later ones (tp > 2)
// into d's receive slots, which d adds in on its comm stream. No copy runs, so
// the peers' blocks need no pieces; only the own block follows.
absl::Status DirectReduceScatter(OpContext& ctx, int chunks,
                                 const std::vector<engine::BufferId>& out, bool out_row_is_block) {
  const int tp = ctx.tp();
  const int64_t mr = ctx.op().m / tp, n = ctx.op().n;
  auto out_row = [&](int r) { return (out_row_is_block ? r * mr : 0); };
  for (int r = 0; r < tp; ++r) {
    // Peers store into our buffers from here on: each must have started this
    // iteration (its fork), so it is done with them from the last one.
    RETURN_IF_ERROR(ctx.WaitAll(ctx.rank(r).compute, EventKind::kFork));
  }
  for (int s = 1; s < tp; ++s) {
    for (int r = 0; r < tp; ++r) {
      RankState& rs = ctx.rank(r);
      const int d = (r + s) % tp;
      const engine::BufferId dst = s == 1 ? out[d] : ctx.rank(d).slots[s - 2];
      RETURN_IF_ERROR(GemmRows(ctx, r, rs.compute, rs.a, d * mr, dst, s == 1 ? out_row(d) : 0, mr,
                               /*beta=*/0.0f, /*c_on_peer=*/true));
      RETURN_IF_ERROR(ctx.Record(r, rs.compute, EventKind::kStored, s));
    }
  }
  // Every own piece runs on the compute stream, so one wait before the first
  // covers them all: with two ranks for the one writer itself; with more, for
  // the comm stream, which first adds the slots.
  const bool via_comm = tp > 2;
  for (int r = 0; r < tp; ++r) {
    RankState& rs = ctx.rank(r);
    const engine::StreamId waiter = via_comm ? rs.comm : rs.compute;
    for (int s = 1; s < tp; ++s)
      RETURN_IF_ERROR(ctx.Wait(waiter, (r - s + tp) % tp, EventKind::kStored, s));
    if (!via_comm) continue;
    const engine::BufferRef mine = ctx.Rows(out[r], out_row(r), mr, n);
    for (int slot = 0; slot < tp - 2; ++slot) {
      RETURN_IF_ERROR(ctx.engine().Accumulate(rs.comm, mine, ctx.Rows(rs.slots[slot], 0, mr, n),
                                              ctx.reduced_dtype()));
    }
    RETURN_IF_ERROR(ctx.Record(r, rs.comm, EventKind::kArrived));
    RETURN_IF_ERROR(ctx.Wait(rs.compute, r, EventKind::kArrived));
  }
  return OwnBlockOnArrivals(ctx, chunks, out, out_row_is_block, /*arrived=*/std::nullopt);
}

}  // namespace

absl::Status RingReduceScatter(OpContext& ctx, Transport transport, int chunks,
                               const std::vector<engine::BufferId>& partial,
                               const std::vector<engine::BufferId>& out, bool out_row_is_block) {
  if (transport == Transport::kDirect) {
    return DirectReduceScatter(ctx, chunks, out, out_row_is_block);
  }
  const int tp = ctx.tp();
  const int64_t mr = ctx.op().m / tp, n = ctx.op().n;
  auto out_row = [&](int r) { return (out_row_is_block ? r * mr : 0); };
  // Step s: every rank computes block (r + s) % tp, piece by piece, and sends
  // each piece to its owner as soon as it is done. The first arrival lands in
  // the owner's output rows; later ones (tp > 2) in receive slot s - 2.
  for (int s = 1; s < tp; ++s) {
    for (int c = 0; c < chunks; ++c) {
      const int index = s * chunks + c;
      const auto [piece_row, rc] = PieceOf(mr, chunks, c);
      for (int r = 0; r < tp; ++r) {
        RankState& rs = ctx.rank(r);
        const int64_t row = ((r + s) % tp) * mr + piece_row;
        RETURN_IF_ERROR(GemmRows(ctx, r, rs.compute, rs.a, row, partial[r], row, rc));
        RETURN_IF_ERROR(ctx.Record(r, rs.compute, EventKind::kPartial, index));
      }
      std::vector<RankTransfer> step;
      for (int r = 0; r < tp; ++r) {
        RETURN_IF_ERROR(
            WaitForProducers(ctx, r, ctx.rank(r).comm, transport, EventKind::kPartial, index));
        const int d = (r + s) % tp;
        const engine::BufferRef dst = s == 1 ? ctx.Rows(out[d], out_row(d) + piece_row, rc, n)
                                             : ctx.Rows(ctx.rank(d).slots[s - 2], piece_row, rc, n);
        step.push_back(RankTransfer{r, ctx.Rows(partial[r], d * mr + piece_row, rc, n), d, dst});
      }
      RETURN_IF_ERROR(Exchange(ctx, transport, step));
      // After the last step's transfer of piece c, the owner adds the earlier
      // arrivals held in slots (tp > 2) on its comm stream; piece c is then
      // complete, and recorded at once so that its GEMM need not wait for later pieces.
      if (s < tp - 1) continue;
      for (int r = 0; r < tp; ++r) {
        RankState& rs = ctx.rank(r);
        const engine::BufferRef mine = ctx.Rows(out[r], out_row(r) + piece_row, rc, n);
        for (int slot = 0; slot < tp - 2; ++slot) {
          RETURN_IF_ERROR(ctx.engine().Accumulate(
              rs.comm, mine, ctx.Rows(rs.slots[slot], piece_row, rc, n), ctx.reduced_dtype()));
        }
        RETURN_IF_ERROR(ctx.Record(r, rs.comm, EventKind::kArrived, c));
      }
    }
  }
  return OwnBlockOnArrivals(ctx, chunks, out, out_row_is_block, EventKind::kArrived);
}

absl::Status EnqueueGemmRs(OpContext& ctx, const Schedule& s) {
  return EnqueueByMode(ctx, s, {"gemm_rs", Serial, Bulk, Chunked, Ring});
}

}  // namespace overlap::ops
