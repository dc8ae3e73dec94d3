// The collectives alone (all_gather, reduce_scatter, all_reduce): X in the
// rank's A buffer, the result in Y, out of place, on the compute stream. X is
// never written during an iteration, so a p2p pull from a peer's X needs no wait.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/ops/collectives.h"
#include "server/ops/layer_ops.h"

namespace overlap::ops {

absl::Status EnqueueCollectiveOnly(OpContext& ctx, const Schedule& s) {
  if (s.mode != OverlapMode::kSerial) {
    return absl::InvalidArgumentError(absl::StrCat(OpTypeName(ctx.op().type), " ", s.Name(),
                                                   ": a collective alone only runs serial"));
  }
  const int tp = ctx.tp();
  const LocalShapes& sh = ctx.shapes();
  if (ctx.op().type == OpType::kAllReduce) {
    std::vector<engine::BufferId> src, dst;
    for (int r = 0; r < tp; ++r) {
      src.push_back(ctx.rank(r).a);
      dst.push_back(ctx.rank(r).y);
    }
    return AllReduceRowsInto(ctx, s.transport, On::kCompute, src, dst, 0, sh.y_rows, sh.y_cols,
                             /*tag=*/0, s.algorithm);
  }
  std::vector<engine::BufferRef> src, dst;
  for (int r = 0; r < tp; ++r) {
    src.push_back(ctx.Rows(ctx.rank(r).a, 0, sh.a_rows, sh.a_cols));
    dst.push_back(ctx.Rows(ctx.rank(r).y, 0, sh.y_rows, sh.y_cols));
  }
  if (ctx.op().type == OpType::kAllGather)
    return AllGather(ctx, s.transport, On::kCompute, src, dst);
  return ReduceScatter(ctx, s.transport, On::kCompute, src, dst);
}

absl::Status EnqueueAllReduceRows(OpContext& ctx, const Schedule& s, RowRange range) {
  if (ctx.op().type != OpType::kAllReduce) {
    return absl::InvalidArgumentError(
        absl::StrCat(OpTypeName(ctx.op().type), ": only an all_reduce runs in row pieces"));
  }
  return ctx.ForEachGroup([&] {
    std::vector<engine::BufferId> src, dst;
    for (int r = 0; r < ctx.tp(); ++r) {
      src.push_back(ctx.rank(r).a);
      dst.push_back(ctx.rank(r).y);
    }
    return AllReduceRowsInto(ctx, s.transport, On::kCompute, src, dst, range.row, range.rows,
                             ctx.shapes().y_cols, /*tag=*/0, s.algorithm);
  });
}

}  // namespace overlap::ops
