#include "server/ops/layer_ops.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/ops/collectives.h"

namespace overlap::ops {

absl::Status GemmRows(OpContext& ctx, int r, engine::StreamId stream, engine::BufferId a,
                      int64_t a_row, engine::BufferId c, int64_t c_row, int64_t rows, float beta,
                      bool c_on_peer) {
  if (rows == 0) return absl::OkStatus();
  engine::GemmArgs g = ctx.WeightsGemm(r);
  g.m = rows;
  g.a = ctx.Matrix(a, a_row, g.k);
  g.c = ctx.Matrix(c, c_row, g.n);
  g.beta = beta;
  g.c_on_peer = c_on_peer;
  // Rows of Y where the next op's input comes from this GEMM's epilogue
  // (OpContext::SetEpilogue): the same rows of it.
  const engine::BufferId epilogue_out = ctx.rank(r).epilogue_out;
  if (c == ctx.rank(r).y && epilogue_out != engine::kNoBuffer) {
    g.epilogue = ctx.epilogue();
    g.d = ctx.Matrix(epilogue_out, c_row, g.n);
  }
  return ctx.engine().Gemm(stream, g);
}

absl::Status BatchedGemmRows(OpContext& ctx, int r, engine::StreamId stream, RowBlocks a,
                             RowBlocks c, int64_t rows) {
  engine::GemmArgs g = ctx.WeightsGemm(r);
  g.m = rows;
  g.a = ctx.Matrix(a.buffer, a.row, g.k);
  g.c = ctx.Matrix(c.buffer, c.row, g.n);
  g.batch = ctx.tp();
  g.stride_a = a.step * g.k;
  g.stride_b = 0;
  g.stride_c = c.step * g.n;
  return ctx.engine().Gemm(stream, g);
}

namespace {

absl::Status GemmAloneRowsInGroup(OpContext& ctx, int64_t rows);

// Over one rank there is nothing to communicate, whatever the schedule: an op
// with a GEMM is its GEMM alone (A is whole, the partial is Y), and a
// collective leaves its input as it is. Its output is that input where the
// context aliased them (OutputAliasesInput), else one local copy; never an
// engine collective, which at one rank would still launch a kernel.
absl::Status OneRankInGroup(OpContext& ctx) {
  if (!IsCollectiveOnly(ctx.op().type)) return GemmAloneRowsInGroup(ctx, ctx.op().m);
  if (ctx.OutputAliasesInput(0)) return absl::OkStatus();
  const LocalShapes& sh = ctx.shapes();
  const RankState& rs = ctx.rank(0);
  return ctx.engine().PeerCopy(rs.compute, ctx.Rows(rs.y, 0, sh.y_rows, sh.y_cols), rs.device,
                               ctx.Rows(rs.a, 0, sh.a_rows, sh.a_cols), rs.device);
}

absl::Status EnqueueOpInGroup(OpContext& ctx, const Schedule& s) {
  if (s.transport == Transport::kDirect &&
      (s.mode != OverlapMode::kRing || ctx.op().type == OpType::kAgGemm)) {
    return absl::InvalidArgumentError(
        absl::StrCat(OpTypeName(ctx.op().type), " ", s.Name(),
                     ": transport direct is only for the gemm_rs and gemm_ar rings"));
  }
  if (IsCollectiveOnly(ctx.op().type) && s.mode != OverlapMode::kSerial) {
    return absl::InvalidArgumentError(absl::StrCat(OpTypeName(ctx.op().type), " ", s.Name(),
                                                   ": a collective alone only runs serial"));
  }
  if (IsGemmOnly(ctx.op().type) && s.mode != OverlapMode::kSerial) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemm ", s.Name(), ": a GEMM alone only runs serial"));
  }
  if (ctx.tp() == 1) return OneRankInGroup(ctx);
  switch (ctx.op().type) {
    case OpType::kAgGemm:
      return EnqueueAgGemm(ctx, s);
    case OpType::kGemmRs:
      return EnqueueGemmRs(ctx, s);
    case OpType::kGemmAr:
      return EnqueueGemmAr(ctx, s);
    case OpType::kAllGather:
    case OpType::kReduceScatter:
    case OpType::kAllReduce:
      return EnqueueCollectiveOnly(ctx, s);
    case OpType::kGemm:
      return EnqueueGemmAlone(ctx);
  }
  return absl::InvalidArgumentError("unknown op type");
}

absl::Status GemmAloneRowsInGroup(OpContext& ctx, int64_t rows) {
  if (IsCollectiveOnly(ctx.op().type)) {
    return absl::InvalidArgumentError(
        absl::StrCat(OpTypeName(ctx.op().type), " has no GEMM to run alone"));
  }
  for (int r = 0; r < ctx.tp(); ++r) {
    RankState& rs = ctx.rank(r);
    // The buffers the op's own GEMM reads and writes: the gathered A and the
    // partial, except on one rank, where A is whole and the partial is Y.
    const bool split = ctx.tp() > 1;
    const bool ag = ctx.op().type == OpType::kAgGemm;
    const engine::BufferId a = ag && split ? rs.full : rs.a;
    const engine::BufferId c = ctx.op().type == OpType::kGemmRs && split ? rs.full : rs.y;
    RETURN_IF_ERROR(GemmRows(ctx, r, rs.compute, a, 0, c, 0, rows));
  }
  return absl::OkStatus();
}

// The unchunked collective on stream `on`; with `use_spare` it works on the spare
// buffer instead of the one the GEMM alone touches (gathered A, partial, or Y).
absl::Status Collective(OpContext& ctx, Transport transport, On on, bool use_spare) {
  const int tp = ctx.tp();
  if (tp == 1) return absl::OkStatus();
  const int64_t m = ctx.op().m, mr = m / tp;
  std::vector<engine::BufferRef> src, dst;
  switch (ctx.op().type) {
    case OpType::kAgGemm: {
      const int64_t k = ctx.op().k;
      for (int r = 0; r < tp; ++r) {
        src.push_back(ctx.Rows(ctx.rank(r).a, 0, mr, k));
        dst.push_back(ctx.Rows(use_spare ? ctx.rank(r).spare : ctx.rank(r).full, 0, m, k));
      }
      return AllGather(ctx, transport, on, src, dst);
    }
    case OpType::kGemmRs: {
      const int64_t n = ctx.op().n;
      for (int r = 0; r < tp; ++r) {
        src.push_back(ctx.Rows(use_spare ? ctx.rank(r).spare : ctx.rank(r).full, 0, m, n));
        dst.push_back(ctx.Rows(ctx.rank(r).y, 0, mr, n));
      }
      return ReduceScatter(ctx, transport, on, src, dst);
    }
    case OpType::kGemmAr: {
      std::vector<engine::BufferId> bufs;
      for (int r = 0; r < tp; ++r) bufs.push_back(use_spare ? ctx.rank(r).spare : ctx.rank(r).y);
      return AllReduceRows(ctx, transport, on, bufs, 0, m, ctx.op().n, /*tag=*/100);
    }
    case OpType::kAllGather:
    case OpType::kReduceScatter:
    case OpType::kAllReduce:
      // The op itself is the collective alone, and has no GEMM to run beside it.
      if (use_spare) {
        return absl::InvalidArgumentError(
            absl::StrCat(OpTypeName(ctx.op().type), " has no GEMM to run beside its collective"));
      }
      return EnqueueCollectiveOnly(ctx, Schedule{OverlapMode::kSerial, 1, transport});
    case OpType::kGemm:
      return absl::InvalidArgumentError("gemm has no collective");
  }
  return absl::InvalidArgumentError("unknown op type");
}

}  // namespace

// The entry points run the op on each of its groups in turn (OpContext::
// ForEachGroup): every group's work is only enqueued, so they all run at once.
absl::Status EnqueueOp(OpContext& ctx, const Schedule& s) {
  return ctx.ForEachGroup([&] { return EnqueueOpInGroup(ctx, s); });
}

absl::Status EnqueueGemmAlone(OpContext& ctx) { return EnqueueGemmAloneRows(ctx, ctx.op().m); }

absl::Status EnqueueGemmAloneRows(OpContext& ctx, int64_t rows) {
  return ctx.ForEachGroup([&] { return GemmAloneRowsInGroup(ctx, rows); });
}

absl::Status EnqueueCommAlone(OpContext& ctx, Transport transport) {
  return ctx.ForEachGroup(
      [&] { return Collective(ctx, transport, On::kCompute, /*use_spare=*/false); });
}

absl::Status EnqueueGemmBesideComm(OpContext& ctx, Transport transport, EventKind end) {
  return ctx.ForEachGroup([&]() -> absl::Status {
    RETURN_IF_ERROR(ctx.ForkComm(transport));
    RETURN_IF_ERROR(Collective(ctx, transport, On::kComm, /*use_spare=*/true));
    RETURN_IF_ERROR(EnqueueGemmAlone(ctx));
    for (int r = 0; r < ctx.tp(); ++r) RETURN_IF_ERROR(ctx.Record(r, ctx.rank(r).compute, end));
    return ctx.JoinComm();
  });
}

}  // namespace overlap::ops
