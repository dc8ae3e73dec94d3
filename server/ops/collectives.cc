#include "server/ops/collectives.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/ops/all_reduce_hierarchical.h"
#include "server/ops/all_reduce_p2p.h"

namespace overlap::ops {

using engine::BufferRef;
using engine::StreamId;

namespace {

// `bytes` of what the send buffers hold, in elements of their dtype (an op's
// gathers move its dtype, its reductions the reduced one: OpContext::DTypeOf).
engine::CollectiveArgs Args(OpContext& ctx, On on, size_t bytes, const std::vector<BufferRef>& send,
                            const std::vector<BufferRef>& recv) {
  engine::CollectiveArgs args;
  args.dtype = ctx.DTypeOf(send[0].buffer);
  args.count = bytes / DTypeSize(args.dtype);
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

namespace {

BufferRef Slice(const BufferRef& ref, size_t offset, size_t bytes) {
  return BufferRef{ref.buffer, ref.offset + offset, bytes};
}

bool SameRange(const BufferRef& a, const BufferRef& b) {
  return a.buffer == b.buffer && a.offset == b.offset && a.bytes == b.bytes;
}

// Rank r's own block of an all-gather, a local copy. On the compute stream it
// runs on the idle comm stream instead, beside the peer copies rather than
// after them (when both roles are one stream, as on side streams, in order).
absl::Status CopyOwnBlock(OpContext& ctx, int r, On on, const BufferRef& to,
                          const BufferRef& from) {
  const RankState& rs = ctx.rank(r);
  if (on == On::kComm || rs.comm == rs.compute) {
    return ctx.engine().PeerCopy(StreamOf(ctx, r, on), to, rs.device, from, rs.device);
  }
  RETURN_IF_ERROR(ctx.Record(r, rs.compute, EventKind::kOwnBlock));
  RETURN_IF_ERROR(ctx.Wait(rs.comm, r, EventKind::kOwnBlock));
  RETURN_IF_ERROR(ctx.engine().PeerCopy(rs.comm, to, rs.device, from, rs.device));
  RETURN_IF_ERROR(ctx.Record(r, rs.comm, EventKind::kOwnBlockCopied));
  return ctx.Wait(rs.compute, r, EventKind::kOwnBlockCopied);
}

// p2p reduction of one block on rank r: `out` gets `own` (rank r's
// contribution, on its device) plus peer_block(q) of every peer q. The first
// peer's block is pulled straight into `out` and ours added to it, so no local
// copy of ours goes first; later peers' blocks land in slots. When `out` is
// `own` itself (in place) every peer's block goes through a slot.
absl::Status ReduceBlockP2p(OpContext& ctx, int r, StreamId stream, const BufferRef& out,
                            const BufferRef& own, const std::function<BufferRef(int)>& peer_block) {
  const int tp = ctx.tp();
  const int device = ctx.rank(r).device;
  const bool in_place = SameRange(out, own);
  if (tp == 1) {
    if (in_place) return absl::OkStatus();
    return ctx.engine().PeerCopy(stream, out, device, own, device);
  }
  std::vector<BufferRef> slots;
  for (int i = 1; i < tp; ++i) {
    const int q = (r + i) % tp;
    BufferRef to = out;
    if (in_place || i > 1) {
      to = BufferRef{ctx.rank(r).slots[slots.size()], 0, out.bytes};
      slots.push_back(to);
    }
    RETURN_IF_ERROR(ctx.engine().PeerCopy(stream, to, device, peer_block(q), ctx.rank(q).device));
  }
  if (!in_place) RETURN_IF_ERROR(ctx.engine().Accumulate(stream, out, own, ctx.reduced_dtype()));
  for (const BufferRef& slot : slots) {
    RETURN_IF_ERROR(ctx.engine().Accumulate(stream, out, slot, ctx.reduced_dtype()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WaitForProducers(OpContext& ctx, int r, StreamId stream, Transport transport,
                              EventKind kind, int index) {
  if (transport == Transport::kP2p) return ctx.WaitAll(stream, kind, index);
  return ctx.Wait(stream, r, kind, index);
}

absl::Status AllGather(OpContext& ctx, Transport transport, On on,
                       const std::vector<BufferRef>& src, const std::vector<BufferRef>& dst,
                       OwnBlock own) {
  const int tp = ctx.tp();
  const size_t block = src[0].bytes;
  if (transport == Transport::kNccl && tp > 1) {
    return ctx.engine().AllGather(Args(ctx, on, block, src, dst));
  }
  for (int r = 0; r < tp; ++r) {
    const StreamId stream = StreamOf(ctx, r, on);
    const int device = ctx.rank(r).device;
    // The peers' blocks first, starting with the next peer so that the ranks
    // do not all pull from one GPU at once.
    for (int i = 1; i < tp; ++i) {
      const int q = (r + i) % tp;
      RETURN_IF_ERROR(ctx.engine().PeerCopy(stream, Slice(dst[r], q * block, block), device, src[q],
                                            ctx.rank(q).device));
    }
    const BufferRef mine = Slice(dst[r], r * block, block);
    if (own == OwnBlock::kNotNeeded || SameRange(mine, src[r])) continue;
    RETURN_IF_ERROR(CopyOwnBlock(ctx, r, on, mine, src[r]));
  }
  return absl::OkStatus();
}

absl::Status ReduceScatter(OpContext& ctx, Transport transport, On on,
                           const std::vector<BufferRef>& src, const std::vector<BufferRef>& dst) {
  const int tp = ctx.tp();
  const size_t block = dst[0].bytes;
  if (transport == Transport::kNccl && tp > 1) {
    return ctx.engine().ReduceScatter(Args(ctx, on, block, src, dst));
  }
  for (int r = 0; r < tp; ++r) {
    RETURN_IF_ERROR(ReduceBlockP2p(ctx, r, StreamOf(ctx, r, on), dst[r],
                                   Slice(src[r], r * block, block),
                                   [&](int q) { return Slice(src[q], r * block, block); }));
  }
  return absl::OkStatus();
}

absl::Status AllReduceRows(OpContext& ctx, Transport transport, On on,
                           const std::vector<engine::BufferId>& buffers, int64_t row, int64_t rows,
                           int64_t cols, int tag) {
  return AllReduceRowsInto(ctx, transport, on, buffers, buffers, row, rows, cols, tag);
}

absl::Status AllReduceRowsInto(OpContext& ctx, Transport transport, On on,
                               const std::vector<engine::BufferId>& src,
                               const std::vector<engine::BufferId>& dst, int64_t row, int64_t rows,
                               int64_t cols, int tag, AllReduceAlgorithm algorithm) {
  const int tp = ctx.tp();
  if (rows == 0) return absl::OkStatus();
  if (tp == 1) {
    if (src == dst) return absl::OkStatus();
    const int device = ctx.rank(0).device;
    return ctx.engine().PeerCopy(StreamOf(ctx, 0, on), ctx.Rows(dst[0], row, rows, cols), device,
                                 ctx.Rows(src[0], row, rows, cols), device);
  }
  if (algorithm == AllReduceAlgorithm::kAuto) {
    return absl::InternalError("all-reduce algorithm auto must be resolved before it runs");
  }
  if (algorithm != AllReduceAlgorithm::kDefault && src == dst) {
    return absl::InternalError(
        absl::StrCat("all-reduce ", AllReduceAlgorithmName(algorithm), " runs out of place only"));
  }
  if (algorithm == AllReduceAlgorithm::kHierarchical) {
    return AllReduceHierarchical(ctx, transport, on, src, dst, row, rows, cols, tag);
  }
  if (transport == Transport::kNccl) {
    std::vector<BufferRef> send, recv;
    for (int r = 0; r < tp; ++r) {
      send.push_back(ctx.Rows(src[r], row, rows, cols));
      recv.push_back(ctx.Rows(dst[r], row, rows, cols));
    }
    if (algorithm == AllReduceAlgorithm::kParameterServer) {
      return absl::InvalidArgumentError("all-reduce ps is a copy-engine layout: transport p2p");
    }
    engine::CollectiveArgs args = Args(ctx, on, send[0].bytes, send, recv);
    args.algorithm = algorithm == AllReduceAlgorithm::kRing ? engine::LibraryAlgorithm::kRing
                     : algorithm == AllReduceAlgorithm::kTree
                         ? engine::LibraryAlgorithm::kTree
                         : engine::LibraryAlgorithm::kLibraryChoice;
    return ctx.engine().AllReduce(args);
  }
  switch (algorithm) {
    case AllReduceAlgorithm::kDefault:
    case AllReduceAlgorithm::kAuto:  // refused above
      break;                         // direct, below
    case AllReduceAlgorithm::kRing:
      return AllReduceRingP2p(ctx, on, src, dst, row, rows, cols, tag);
    case AllReduceAlgorithm::kTree:
      return AllReduceTreeP2p(ctx, on, src, dst, row, rows, cols, tag);
    case AllReduceAlgorithm::kParameterServer:
      return AllReduceParameterServerP2p(ctx, on, src, dst, row, rows, cols, tag);
    case AllReduceAlgorithm::kHierarchical:
      break;  // above
  }
  // Two phases: reduce part r of the rows on rank r, then every rank pulls the
  // reduced parts of its peers. Parts are ceil(rows / tp) rows, the last shorter.
  const int64_t part = (rows + tp - 1) / tp;
  auto part_rows = [&](int q) { return std::max<int64_t>(0, std::min(part, rows - q * part)); };
  for (int r = 0; r < tp; ++r) {
    const StreamId stream = StreamOf(ctx, r, on);
    const int64_t n = part_rows(r);
    if (n > 0) {
      RETURN_IF_ERROR(ReduceBlockP2p(ctx, r, stream, ctx.Rows(dst[r], row + r * part, n, cols),
                                     ctx.Rows(src[r], row + r * part, n, cols), [&](int q) {
                                       return ctx.Rows(src[q], row + r * part, n, cols);
                                     }));
    }
    RETURN_IF_ERROR(ctx.Record(r, stream, EventKind::kArReduced, tag));
  }
  for (int r = 0; r < tp; ++r) {
    const StreamId stream = StreamOf(ctx, r, on);
    // Peers must have reduced their part (which we pull) and, in place,
    // finished pulling ours before we overwrite it.
    RETURN_IF_ERROR(ctx.WaitAll(stream, EventKind::kArReduced, tag));
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
  if (step.empty()) return absl::OkStatus();  // one rank: no send/recv group to launch
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
