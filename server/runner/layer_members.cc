#include "server/runner/layer_members.h"

#include <algorithm>

#include "common/status_macros.h"
#include "server/ops/chain_reference.h"

namespace overlap::runner {

// Whether another op reads this one's output: it must be whole when that one
// runs, so it is not cut into pieces sent later.
bool IsRead(const JobSpec& spec, const OpSpec& op) {
  for (const OpSpec& other : spec.ops) {
    if (other.input == op.id) return true;
  }
  return false;
}

// Whether an op reads another's output or is read by another: its tensors
// are its own, not a bucket's.
bool InChain(const JobSpec& spec, const OpSpec& op) {
  return !op.input.empty() || IsRead(spec, op);
}

// Member m's input made from its producer's output on m's compute streams:
// each of m's ranks reads what the producer's rank on the same device wrote,
// through m's activation, cast to m's input dtype (fp8: with the chain's scale).
absl::Status EnqueueWiredInput(Member& m) {
  if (m.input_from == nullptr) return absl::OkStatus();
  OpContext& ctx = *m.ctx;
  OpContext& from = *m.input_from->ctx;
  std::map<int, int> from_rank;  // device -> the producer's rank there
  for (int q = 0; q < from.tp(); ++q) from_rank[from.rank(q).device] = q;
  const LocalShapes& out = from.shapes();
  const LocalShapes& in = ctx.shapes();
  for (int r = 0; r < ctx.tp(); ++r) {
    ops::RankState& rank = ctx.rank(r);
    const ops::RankState& source = from.rank(from_rank.at(rank.device));
    engine::ElementwiseArgs args;
    args.src = from.Rows(source.y, 0, out.y_rows, out.y_cols);
    args.src_dtype = from.DTypeOf(source.y);
    args.dst = ctx.Rows(rank.a, 0, in.a_rows, in.a_cols);
    args.dst_dtype = ctx.DTypeOf(rank.a);
    args.rows = out.y_rows;
    args.src_cols = out.y_cols;
    args.activation = ctx.op().activation;
    args.dst_scale = args.dst_dtype == DType::kFP8 ? kChainFp8Dequant : 1.0f;
    RETURN_IF_ERROR(ctx.engine().Elementwise(rank.compute, args));
    RETURN_IF_ERROR(ctx.Record(r, rank.compute, ops::EventKind::kInputReady));
  }
  // A schedule may read a peer's input from its own streams (p2p gathers).
  // Across daemons data moves through collectives only, which wait for their
  // inputs themselves; a stream here cannot wait on another node's event.
  auto local = [&](int r) { return ctx.engine().IsLocalDevice(ctx.rank(r).device); };
  for (int r = 0; r < ctx.tp(); ++r) {
    for (int q = 0; q < ctx.tp() && local(r); ++q) {
      if (local(q)) RETURN_IF_ERROR(ctx.Wait(ctx.rank(r).compute, q, ops::EventKind::kInputReady));
    }
  }
  return absl::OkStatus();
}

// Each device's main compute stream: the layer step's main streams, which
// every op of a mesh reaches through its rank on that device.
using MainStreams = std::map<int, engine::StreamId>;

MainStreams MainStreamsOf(OpContext& main) {
  MainStreams streams;
  for (int r = 0; r < main.tp(); ++r) streams[main.rank(r).device] = main.rank(r).compute;
  return streams;
}

// Deferred member `m` sends its next piece, or the
// whole op: its side streams wait for the main streams to get here first.
absl::Status SendDeferred(Member& m, const MainStreams& main) {
  OpContext& ctx = *m.ctx;
  const int fork = static_cast<int>(m.sent);  // one event per piece, of m's own context
  for (int q = 0; q < ctx.tp(); ++q) {
    RETURN_IF_ERROR(ctx.Record(q, main.at(ctx.rank(q).device), ops::EventKind::kLayerFork, fork));
    RETURN_IF_ERROR(ctx.Wait(ctx.rank(q).compute, q, ops::EventKind::kLayerFork, fork));
  }
  if (m.sent == 0) RETURN_IF_ERROR(EnqueueWiredInput(m));
  if (m.pieces.empty()) {
    RETURN_IF_ERROR(EnqueueOp(ctx, m.schedule));
  } else {
    RETURN_IF_ERROR(ops::EnqueueAllReduceRows(ctx, m.schedule, m.pieces[m.sent]));
  }
  ++m.sent;
  if (Unsent(m)) return absl::OkStatus();
  for (int q = 0; q < ctx.tp(); ++q) {
    RETURN_IF_ERROR(ctx.Record(q, ctx.rank(q).compute, ops::EventKind::kLayerDone));
  }
  return absl::OkStatus();
}

int Pieces(const Member& m) { return std::max<int>(1, static_cast<int>(m.pieces.size())); }

bool Unsent(const Member& m) { return static_cast<int>(m.sent) < Pieces(m); }

// The main streams wait for the deferred ops that join before `id` ("" = the
// end), each first sending what it has not sent yet.
absl::Status JoinBefore(std::vector<Member>& members, const std::string& id,
                        const MainStreams& main) {
  for (size_t i = 0; i < members.size(); ++i) {
    Member& m = members[i];
    if (!m.deferred || m.join_before != id) continue;
    while (Unsent(m)) RETURN_IF_ERROR(SendDeferred(m, main));
    for (int q = 0; q < m.ctx->tp(); ++q) {
      RETURN_IF_ERROR(
          m.ctx->Wait(main.at(m.ctx->rank(q).device), q, ops::EventKind::kLayerDone));
    }
  }
  return absl::OkStatus();
}

void Chunk(std::vector<Member>& members, const JobSpec& spec, int chunk_kib, bool lane_only) {
  if (chunk_kib <= 0) return;
  const int64_t es =
      static_cast<int64_t>(DTypeSize(ops::BufferDTypesFor(OpType::kAllReduce, spec.dtype).a));
  const int64_t chunk_bytes = int64_t{chunk_kib} << 10;
  for (Member& m : members) {
    const bool candidate = lane_only ? m.on_deferred_lane : m.deferred && m.bucketed.empty();
    if (candidate && Cuttable(spec, m)) CutIntoPieces(m, chunk_bytes, es);
  }
}

bool Cuttable(const JobSpec& spec, const Member& m) {
  return m.op.type == OpType::kAllReduce && !IsRead(spec, m.op) &&
         m.schedule.algorithm != AllReduceAlgorithm::kHierarchical;
}

void CutIntoPieces(Member& m, int64_t chunk_bytes, int64_t es) {
  if (m.op.m * m.op.n * es <= chunk_bytes) return;
  const int64_t rows = std::max<int64_t>(1, chunk_bytes / (m.op.n * es));
  for (int64_t row = 0; row < m.op.m; row += rows) {
    m.pieces.push_back(ops::RowRange{row, std::min(rows, m.op.m - row)});
  }
}

}  // namespace overlap::runner
