// The overlapped layer ops, written once against the engine. Each Enqueue*
// function enqueues one iteration on every rank of the context, starting from
// the compute stream and joining everything back into it, so the caller can
// bracket it with events on the compute stream. No host synchronisation inside.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "common/schedule.h"
#include "server/ops/op_context.h"

namespace overlap::ops {

absl::Status EnqueueAgGemm(OpContext& ctx, const Schedule& schedule);  // ag_gemm.cc
absl::Status EnqueueGemmRs(OpContext& ctx, const Schedule& schedule);  // gemm_rs.cc
absl::Status EnqueueGemmAr(OpContext& ctx, const Schedule& schedule);  // gemm_ar.cc
// all_gather, reduce_scatter, all_reduce (collective_ops.cc): serial only.
absl::Status EnqueueCollectiveOnly(OpContext& ctx, const Schedule& schedule);

// Rows [row, row + rows) of an all_reduce op's X and Y: one piece of a chunked
// gradient all-reduce (the layer step, JobSpec::chunk_kib), with the schedule's
// transport and algorithm; every group of the op at once.
struct RowRange {
  int64_t row = 0;
  int64_t rows = 0;
};
absl::Status EnqueueAllReduceRows(OpContext& ctx, const Schedule& schedule, RowRange range);

// Dispatches on the op type. Over a group of one rank every schedule is the
// same: the GEMM alone, or for a collective its input as its output (an alias,
// else a local copy), never an engine collective; the report says so
// (common/one_rank.h).
absl::Status EnqueueOp(OpContext& ctx, const Schedule& schedule);
// The unchunked per-rank GEMM alone, no communication (GEMM ops only).
absl::Status EnqueueGemmAlone(OpContext& ctx);
// Its first `rows` rows only: the head start that keeps a GPU busy while the
// host enqueues a timed iteration (job_runner.cc).
absl::Status EnqueueGemmAloneRows(OpContext& ctx, int64_t rows);
// The unchunked collective alone, no GEMM (reads whatever the buffers hold).
absl::Status EnqueueCommAlone(OpContext& ctx, Transport transport);

// The unchunked GEMM on the compute stream while the unchunked collective runs
// on the comm stream (independent buffers); records (end_tag) on each rank's
// compute stream right after its GEMM, then joins.
absl::Status EnqueueGemmBesideComm(OpContext& ctx, Transport transport, EventKind end);

// Shared by gemm_rs and gemm_ar (gemm_rs.cc): the ring reduce-scatter with the
// reduction fused into the GEMM. For each peer in turn, rank r computes that
// peer's block of the partial into `partial[r]` (rows d*m/tp, in `chunks`
// pieces) and sends each piece as soon as it is done; then it computes its own
// block with beta = 1 on top of what arrived, into `out[r]` rows starting at
// r*m/tp (out_row_is_block) or 0. Records (reduced, c) on the compute stream
// after piece c of the own block. The caller forks and joins the comm stream.
// Over kDirect the peers' blocks are not pieced and not sent: each is one GEMM
// whose output is the owner's memory (`partial` is then unused).
absl::Status RingReduceScatter(OpContext& ctx, Transport transport, int chunks,
                               const std::vector<engine::BufferId>& partial,
                               const std::vector<engine::BufferId>& out, bool out_row_is_block);

// Row-major GEMM helper: C[rows of c at c_row] = A[rows at a_row] x W. With
// c_on_peer, c may belong to another rank (engine.h, GemmArgs::c_on_peer).
// Where c is rank r's Y and the rank has an epilogue output
// (OpContext::SetEpilogue), the same rows of it receive the epilogue's
// activation of them.
absl::Status GemmRows(OpContext& ctx, int r, engine::StreamId stream, engine::BufferId a,
                      int64_t a_row, engine::BufferId c, int64_t c_row, int64_t rows,
                      float beta = 0.0f, bool c_on_peer = false);

// Rows of one buffer taken in tp blocks: block b starts at row + b * step.
struct RowBlocks {
  engine::BufferId buffer;
  int64_t row = 0;
  int64_t step = 0;
};
// One batched GEMM of tp blocks of `rows` rows each: block b of C = block b of A x W.
absl::Status BatchedGemmRows(OpContext& ctx, int r, engine::StreamId stream, RowBlocks a,
                             RowBlocks c, int64_t rows);

}  // namespace overlap::ops
