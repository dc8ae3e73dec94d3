// GEMM+RS (row-parallel with sequence parallelism): rank r holds A[m, k/tp] and
// W[k/tp, n]; its partial P = A x W [m, n] is reduce-scattered along m, so rank r
// ends with Y[m/tp, n] = sum over ranks of rows [r*m/tp, (r+1)*m/tp) of P.
#include "common/status_macros.h"
#include "server/ops/collectives.h"
#include "server/ops/layer_ops.h"

namespace overlap::ops {
namespace {

using engine::BufferRef;

// The p2p transport pulls peers' partials, so it must wait for every rank's
// GEMM; a library collective synchronises the ranks itself.
absl::Status WaitForProducers(OpContext& ctx, int r, engine::StreamId stream, Transport transport,
                              const std::string& tag, int index) {
  if (transport == Transport::kP2p) return ctx.WaitAll(stream, tag, index);
  return ctx.Wait(stream, r, tag, index);
}

absl::Status Serial(OpContext& ctx, Transport transport) {
  const int tp = ctx.tp();
  const int64_t m = ctx.op().m, n = ctx.op().n, mr = m / tp;
  std::vector<BufferRef> src, dst;
  for (int r = 0; r < tp; ++r) {
    RankState& rs = ctx.rank(r);
    RETURN_IF_ERROR(GemmRows(ctx, r, rs.compute, rs.a, 0, rs.full, 0, m));
    RETURN_IF_ERROR(ctx.Record(r, rs.compute, "gemm"));
    src.push_back(ctx.Rows(rs.full, 0, m, n));
    dst.push_back(ctx.Rows(rs.y, 0, mr, n));
  }
  if (transport == Transport::kP2p) {
    for (int r = 0; r < tp; ++r) RETURN_IF_ERROR(ctx.WaitAll(ctx.rank(r).compute, "gemm"));
  }
  return ReduceScatter(ctx, transport, On::kCompute, src, dst);
}

// The peers' rows first; their exchange (one group) runs on the comm stream
// while the local rows are computed straight into Y; the arrivals are added last.
absl::Status Bulk(OpContext& ctx, Transport transport) {
  const int tp = ctx.tp();
  const int64_t m = ctx.op().m, n = ctx.op().n, mr = m / tp;
  RETURN_IF_ERROR(ctx.ForkComm());
  for (int r = 0; r < tp; ++r) {
    RankState& rs = ctx.rank(r);
    if (r > 0) RETURN_IF_ERROR(GemmRows(ctx, r, rs.compute, rs.a, 0, rs.full, 0, r * mr));
    if (r < tp - 1) {
      RETURN_IF_ERROR(GemmRows(ctx, r, rs.compute, rs.a, (r + 1) * mr, rs.full, (r + 1) * mr,
                               (tp - 1 - r) * mr));
    }
    RETURN_IF_ERROR(ctx.Record(r, rs.compute, "gemm"));
  }
  std::vector<RankTransfer> step;
  for (int r = 0; r < tp; ++r) {
    RETURN_IF_ERROR(WaitForProducers(ctx, r, ctx.rank(r).comm, transport, "gemm", 0));
    for (int i = 1; i < tp; ++i) {
      const int q = (r + i) % tp;  // rank r receives its rows of q's partial in slot i-1
      step.push_back(RankTransfer{q, ctx.Rows(ctx.rank(q).full, r * mr, mr, n), r,
                                  ctx.Rows(ctx.rank(r).slots[i - 1], 0, mr, n)});
    }
  }
  RETURN_IF_ERROR(Exchange(ctx, transport, step));
  for (int r = 0; r < tp; ++r) {
    RankState& rs = ctx.rank(r);
    RETURN_IF_ERROR(ctx.Record(r, rs.comm, "received"));
    RETURN_IF_ERROR(GemmRows(ctx, r, rs.compute, rs.a, r * mr, rs.y, 0, mr));
    RETURN_IF_ERROR(ctx.Wait(rs.compute, r, "received"));
    for (int i = 1; i < tp; ++i) {
      RETURN_IF_ERROR(ctx.engine().Accumulate(rs.compute, ctx.Rows(rs.y, 0, mr, n),
                                              ctx.Rows(rs.slots[i - 1], 0, mr, n), ctx.dtype()));
    }
  }
  return ctx.JoinComm();
}

// Chunk c: one batched GEMM computes, for every destination rank j, rows
// [j*m/tp + c*rc, +rc) of the partial into ping-pong buffer c % 2 (destination
// major); the comm stream reduce-scatters it into Y rows [c*rc, +rc) while the
// next chunk's GEMM runs.
absl::Status Chunked(OpContext& ctx, Transport transport, int chunks) {
  const int tp = ctx.tp();
  const int64_t m = ctx.op().m, n = ctx.op().n, mr = m / tp, kl = ctx.shapes().a_cols;
  const int64_t rc = mr / chunks;
  RETURN_IF_ERROR(ctx.ForkComm());
  for (int c = 0; c < chunks; ++c) {
    const int p = c % 2;
    std::vector<BufferRef> src, dst;
    for (int r = 0; r < tp; ++r) {
      RankState& rs = ctx.rank(r);
      // The reduce-scatter of chunk c-2 (every peer's pulls, for p2p) must be
      // done with this ping-pong buffer before the GEMM overwrites it.
      if (c >= 2) RETURN_IF_ERROR(WaitForProducers(ctx, r, rs.compute, transport, "rs", c - 2));
      engine::GemmArgs g;
      g.dtype = ctx.dtype();
      g.m = rc;
      g.n = n;
      g.k = kl;
      g.a = ctx.Matrix(rs.a, c * rc, kl);
      g.b = ctx.Matrix(rs.w, 0, n);
      g.c = ctx.Matrix(rs.pingpong[p], 0, n);
      g.batch = tp;
      g.stride_a = mr * kl;
      g.stride_b = 0;
      g.stride_c = rc * n;
      RETURN_IF_ERROR(ctx.engine().Gemm(rs.compute, g));
      RETURN_IF_ERROR(ctx.Record(r, rs.compute, "gemm", c));
      src.push_back(ctx.Rows(rs.pingpong[p], 0, tp * rc, n));
      dst.push_back(ctx.Rows(rs.y, c * rc, rc, n));
    }
    for (int r = 0; r < tp; ++r) {
      RETURN_IF_ERROR(WaitForProducers(ctx, r, ctx.rank(r).comm, transport, "gemm", c));
    }
    RETURN_IF_ERROR(ReduceScatter(ctx, transport, On::kComm, src, dst));
    for (int r = 0; r < tp; ++r) RETURN_IF_ERROR(ctx.Record(r, ctx.rank(r).comm, "rs", c));
  }
  return ctx.JoinComm();
}

}  // namespace

absl::Status RingReduceScatter(OpContext& ctx, Transport transport,
                               const std::vector<engine::BufferId>& out, bool out_row_is_block) {
  const int tp = ctx.tp();
  const int64_t m = ctx.op().m, n = ctx.op().n, mr = m / tp;
  RETURN_IF_ERROR(ctx.ForkComm());
  for (int s = 1; s < tp; ++s) {
    const int p = s % 2;
    for (int r = 0; r < tp; ++r) {
      RankState& rs = ctx.rank(r);
      // Ping-pong p was last sent at step s-2: that transfer must be complete.
      if (s >= 3) RETURN_IF_ERROR(ctx.WaitAll(rs.compute, "sent", s - 2));
      const int d = (r + s) % tp;
      RETURN_IF_ERROR(GemmRows(ctx, r, rs.compute, rs.a, d * mr, rs.pingpong[p], 0, mr));
      RETURN_IF_ERROR(ctx.Record(r, rs.compute, "gemm", s));
    }
    std::vector<RankTransfer> step;
    for (int r = 0; r < tp; ++r) {
      RETURN_IF_ERROR(WaitForProducers(ctx, r, ctx.rank(r).comm, transport, "gemm", s));
      const int d = (r + s) % tp;  // rank d receives from r = d - s in slot s-1
      step.push_back(RankTransfer{r, ctx.Rows(ctx.rank(r).pingpong[p], 0, mr, n), d,
                                  ctx.Rows(ctx.rank(d).slots[s - 1], 0, mr, n)});
    }
    RETURN_IF_ERROR(Exchange(ctx, transport, step));
    for (int r = 0; r < tp; ++r) RETURN_IF_ERROR(ctx.Record(r, ctx.rank(r).comm, "sent", s));
  }
  for (int r = 0; r < tp; ++r) {
    RankState& rs = ctx.rank(r);
    const int64_t out_row = out_row_is_block ? r * mr : 0;
    RETURN_IF_ERROR(GemmRows(ctx, r, rs.compute, rs.a, r * mr, out[r], out_row, mr));
    for (int s = 1; s < tp; ++s) {
      RETURN_IF_ERROR(ctx.Wait(rs.compute, r, "sent", s));
      RETURN_IF_ERROR(ctx.engine().Accumulate(rs.compute, ctx.Rows(out[r], out_row, mr, n),
                                              ctx.Rows(rs.slots[s - 1], 0, mr, n), ctx.dtype()));
    }
  }
  return ctx.JoinComm();
}

absl::Status EnqueueGemmRs(OpContext& ctx, const Schedule& s) {
  switch (s.mode) {
    case OverlapMode::kSerial:
      return Serial(ctx, s.transport);
    case OverlapMode::kBulk:
      return Bulk(ctx, s.transport);
    case OverlapMode::kChunked:
      return Chunked(ctx, s.transport, s.chunks);
    case OverlapMode::kRing: {
      std::vector<engine::BufferId> out;
      for (int r = 0; r < ctx.tp(); ++r) out.push_back(ctx.rank(r).y);
      return RingReduceScatter(ctx, s.transport, out, /*out_row_is_block=*/false);
    }
    case OverlapMode::kAuto:
      break;
  }
  return absl::InvalidArgumentError("gemm_rs: mode auto must be resolved before enqueueing");
}

}  // namespace overlap::ops
