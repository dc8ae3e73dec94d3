#include "server/ops/collectives.h"

#include <algorithm>

#include "common/status_macros.h"

namespace overlap::ops {

using engine::BufferRef;
using engine::StreamId;

namespace {

BufferRef Slice(const BufferRef& ref, size_t offset, size_t bytes) {
  return BufferRef{ref.buffer, ref.offset + offset, bytes};
}

engine::CollectiveArgs Args(OpContext& ctx, On on, size_t count,
                            const std::vector<BufferRef>& send,
                            const std::vector<BufferRef>& recv) {
  engine::CollectiveArgs args;
  args.dtype = ctx.dtype();
  args.count = count;
  args.channel = ctx.channel();
  // The comm stream's collectives run beside the op's GEMMs.
  args.beside_gemm = on == On::kComm;
  for (int r = 0; r < ctx.tp(); ++r) {
    args.ranks.push_back(
        engine::RankBuffers{ctx.rank(r).device, StreamOf(ctx, r, on), send[r], recv[r]});
  }
  return args;
}

}  // namespace

StreamId StreamOf(OpContext& ctx, int r, On on) {
  return on == On::kComm ? ctx.rank(r).comm : ctx.rank(r).compute;
}

absl::Status WaitForProducers(OpContext& ctx, int r, StreamId stream, Transport transport,
                              const std::string& tag, int index) {
  if (transport == Transport::kP2p) return ctx.WaitAll(stream, tag, index);
  return ctx.Wait(stream, r, tag, index);
}

absl::Status AllGather(OpContext& ctx, Transport transport, On on,
                       const std::vector<BufferRef>& src, const std::vector<BufferRef>& dst) {
  const int tp = ctx.tp();
  const size_t block = src[0].bytes;
  if (transport == Transport::kNccl && tp > 1) {
    return ctx.engine().AllGather(Args(ctx, on, block / ctx.esize(), src, dst));
  }
  for (int r = 0; r < tp; ++r) {
    // Start with the next peer so that the ranks do not all pull from one GPU at once.
    for (int i = 0; i < tp; ++i) {
      const int q = (r + i) % tp;
      const BufferRef to = Slice(dst[r], q * block, block);
      if (q == r && to.buffer == src[q].buffer && to.offset == src[q].offset) continue;  // in place
      RETURN_IF_ERROR(ctx.engine().PeerCopy(StreamOf(ctx, r, on), to, ctx.rank(r).device, src[q],
                                            ctx.rank(q).device));
    }
  }
  return absl::OkStatus();
}

absl::Status ReduceScatter(OpContext& ctx, Transport transport, On on,
                           const std::vector<BufferRef>& src, const std::vector<BufferRef>& dst) {
  const int tp = ctx.tp();
  const size_t block = dst[0].bytes;
  if (transport == Transport::kNccl && tp > 1) {
    return ctx.engine().ReduceScatter(Args(ctx, on, block / ctx.esize(), src, dst));
  }
  for (int r = 0; r < tp; ++r) {
    const StreamId stream = StreamOf(ctx, r, on);
    const int device = ctx.rank(r).device;
    RETURN_IF_ERROR(
        ctx.engine().PeerCopy(stream, dst[r], device, Slice(src[r], r * block, block), device));
    for (int i = 1; i < tp; ++i) {
      const int q = (r + i) % tp;
      const BufferRef slot{ctx.rank(r).slots[i - 1], 0, block};
      RETURN_IF_ERROR(ctx.engine().PeerCopy(stream, slot, device, Slice(src[q], r * block, block),
                                            ctx.rank(q).device));
    }
    for (int i = 1; i < tp; ++i) {
      const BufferRef slot{ctx.rank(r).slots[i - 1], 0, block};
      RETURN_IF_ERROR(ctx.engine().Accumulate(stream, dst[r], slot, ctx.dtype()));
    }
  }
  return absl::OkStatus();
}

absl::Status AllReduceRows(OpContext& ctx, Transport transport, On on,
                           const std::vector<engine::BufferId>& buffers, int64_t row,
                           int64_t rows, int64_t cols, int tag) {
  return AllReduceRowsInto(ctx, transport, on, buffers, buffers, row, rows, cols, tag);
}

absl::Status AllReduceRowsInto(OpContext& ctx, Transport transport, On on,
                               const std::vector<engine::BufferId>& src,
                               const std::vector<engine::BufferId>& dst, int64_t row, int64_t rows,
                               int64_t cols, int tag) {
  const int tp = ctx.tp();
  if (rows == 0) return absl::OkStatus();
  const bool in_place = src == dst;
  if (tp == 1) {
    if (in_place) return absl::OkStatus();
    const int device = ctx.rank(0).device;
    return ctx.engine().PeerCopy(StreamOf(ctx, 0, on), ctx.Rows(dst[0], row, rows, cols), device,
                                 ctx.Rows(src[0], row, rows, cols), device);
  }
  if (transport == Transport::kNccl) {
    std::vector<BufferRef> send, recv;
    for (int r = 0; r < tp; ++r) {
      send.push_back(ctx.Rows(src[r], row, rows, cols));
      recv.push_back(ctx.Rows(dst[r], row, rows, cols));
    }
    return ctx.engine().AllReduce(Args(ctx, on, rows * cols, send, recv));
  }
  // Two phases: reduce part r of the rows on rank r, then every rank pulls the
  // reduced parts of its peers. Parts are ceil(rows / tp) rows, the last shorter.
  const int64_t part = (rows + tp - 1) / tp;
  auto part_rows = [&](int q) { return std::max<int64_t>(0, std::min(part, rows - q * part)); };
  for (int r = 0; r < tp; ++r) {
    const StreamId stream = StreamOf(ctx, r, on);
    const int device = ctx.rank(r).device;
    const int64_t n = part_rows(r);
    if (n > 0) {
      const BufferRef mine = ctx.Rows(dst[r], row + r * part, n, cols);
      if (!in_place) {
        RETURN_IF_ERROR(ctx.engine().PeerCopy(stream, mine, device,
                                              ctx.Rows(src[r], row + r * part, n, cols), device));
      }
      for (int i = 1; i < tp; ++i) {
        const int q = (r + i) % tp;
        const BufferRef slot{ctx.rank(r).slots[i - 1], 0, mine.bytes};
        RETURN_IF_ERROR(ctx.engine().PeerCopy(
            stream, slot, device, ctx.Rows(src[q], row + r * part, n, cols), ctx.rank(q).device));
      }
      for (int i = 1; i < tp; ++i) {
        const BufferRef slot{ctx.rank(r).slots[i - 1], 0, mine.bytes};
        RETURN_IF_ERROR(ctx.engine().Accumulate(stream, mine, slot, ctx.dtype()));
      }
    }
    RETURN_IF_ERROR(ctx.Record(r, stream, "ar_reduced", tag));
  }
  for (int r = 0; r < tp; ++r) {
    const StreamId stream = StreamOf(ctx, r, on);
    // Peers must have reduced their part (which we pull) and, in place,
    // finished pulling ours before we overwrite it.
    RETURN_IF_ERROR(ctx.WaitAll(stream, "ar_reduced", tag));
    for (int i = 1; i < tp; ++i) {
      const int q = (r + i) % tp;
      const int64_t n = part_rows(q);
      if (n == 0) continue;
      RETURN_IF_ERROR(ctx.engine().PeerCopy(
          stream, ctx.Rows(dst[r], row + q * part, n, cols), ctx.rank(r).device,
          ctx.Rows(dst[q], row + q * part, n, cols), ctx.rank(q).device));
    }
  }
  return absl::OkStatus();
}

absl::Status Exchange(OpContext& ctx, Transport transport, const std::vector<RankTransfer>& step) {
  if (transport == Transport::kNccl) {
    std::vector<engine::Transfer> transfers;
    for (const RankTransfer& t : step) {
      transfers.push_back(engine::Transfer{ctx.rank(t.from).device, ctx.rank(t.from).comm, t.src,
                                           ctx.rank(t.to).device, ctx.rank(t.to).comm, t.dst});
    }
    return ctx.engine().SendRecv(/*channel=*/0, ctx.devices(), transfers, /*beside_gemm=*/true);
  }
  for (const RankTransfer& t : step) {
    RETURN_IF_ERROR(ctx.engine().PeerCopy(ctx.rank(t.to).comm, t.dst, ctx.rank(t.to).device, t.src,
                                          ctx.rank(t.from).device));
  }
  return absl::OkStatus();
}

}  // namespace overlap::ops
