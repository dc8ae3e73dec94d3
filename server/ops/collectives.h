// Collectives over an op's TP group, on either transport:
//   kNccl: the engine's library collectives and send/recv groups;
//   kP2p:  copy-engine peer copies that each rank pulls from its peers, plus an
//          accumulate for reductions (into the rank's receive slots).
// Every helper enqueues on the stream `on` picks on each rank and never waits on
// producers itself: before a p2p pull the caller makes the puller wait for the
// peer's producing event (WaitAll), which a library collective does implicitly.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/ops/op_context.h"

namespace overlap::ops {

enum class On { kCompute, kComm };
engine::StreamId StreamOf(OpContext& ctx, int r, On on);

// Before a transfer of data produced under event (tag, index): p2p pulls on the
// receiver, so rank r's `stream` waits for that event on every rank; a library
// collective synchronises the ranks itself, so it waits for rank r's own.
absl::Status WaitForProducers(OpContext& ctx, int r, engine::StreamId stream, Transport transport,
                              EventKind kind, int index);

// Rank q's src[q] (all the same size) lands in every rank's dst[r] at offset
// q * src[q].bytes; dst[r] covers tp such blocks. With kNotNeeded (the caller
// reads rank r's own rows from src[r]) p2p leaves block r of dst[r] alone;
// NCCL writes it regardless. p2p on the compute stream copies the own block on
// the comm stream, beside the peers' blocks.
enum class OwnBlock { kNeeded, kNotNeeded };
absl::Status AllGather(OpContext& ctx, Transport transport, On on,
                       const std::vector<engine::BufferRef>& src,
                       const std::vector<engine::BufferRef>& dst, OwnBlock own = OwnBlock::kNeeded);

// src[r] holds tp equal blocks; dst[r] gets the sum over ranks of block r.
// p2p pulls the first peer's block into dst[r] and adds the others' through
// rank r's first tp-2 slots (each at least a block; tp-1 when dst[r] is src[r]'s
// block r itself).
absl::Status ReduceScatter(OpContext& ctx, Transport transport, On on,
                           const std::vector<engine::BufferRef>& src,
                           const std::vector<engine::BufferRef>& dst);

// In place: `rows` rows of `cols` elements starting at `row` of every rank's
// buffer `buffer_of(r)` become their sum over ranks. `tag` names the internal
// events (one per call site and iteration step) for the p2p two-phase version.
absl::Status AllReduceRows(OpContext& ctx, Transport transport, On on,
                           const std::vector<engine::BufferId>& buffers, int64_t row,
                           int64_t rows, int64_t cols, int tag);
// Out of place: those rows of dst[r] become the sum over ranks of the same rows
// of src[q] (src == dst is the in-place AllReduceRows). src is only read.
// `algorithm` other than kDefault (all_reduce ops) pins NCCL's (ring, tree) or
// picks a copy-engine layout (all_reduce_p2p.h); those run out of place only.
absl::Status AllReduceRowsInto(OpContext& ctx, Transport transport, On on,
                               const std::vector<engine::BufferId>& src,
                               const std::vector<engine::BufferId>& dst, int64_t row, int64_t rows,
                               int64_t cols, int tag,
                               AllReduceAlgorithm algorithm = AllReduceAlgorithm::kDefault);

// One point-to-point step: transfer i copies src[i] of rank from[i] into dst[i]
// of rank to[i]. NCCL: a send/recv group on both ranks' comm streams; p2p: the
// receiver pulls on its comm stream.
struct RankTransfer {
  int from = 0;
  engine::BufferRef src;
  int to = 0;
  engine::BufferRef dst;
};
absl::Status Exchange(OpContext& ctx, Transport transport, const std::vector<RankTransfer>& step);

}  // namespace overlap::ops
