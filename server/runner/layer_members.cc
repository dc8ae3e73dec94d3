#include "server/runner/layer_members.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/enum_names.h"
#include "common/status_macros.h"
#include "server/ops/chain_reference.h"

namespace overlap::runner {

Edge EdgeFor(const PlannedOp& consumer, int consumer_degree, const PlannedOp& producer,
             int producer_degree, DType dtype) {
  if (consumer.op.activation != Activation::kNone) return Edge::kFused;
  const DType out = ops::BufferDTypesFor(producer.op.type, dtype).y;
  const DType in = ops::BufferDTypesFor(consumer.op.type, dtype).a;
  if (out != in || in == DType::kFP8) return Edge::kCopy;
  const LocalShapes from = LocalShapesFor(producer.op, producer_degree);
  const LocalShapes to = LocalShapesFor(consumer.op, consumer_degree);
  if (from.y_rows != to.a_rows || from.y_cols != to.a_cols) return Edge::kCopy;
  for (int device : consumer.devices) {
    if (std::find(producer.devices.begin(), producer.devices.end(), device) ==
        producer.devices.end()) {
      return Edge::kCopy;
    }
  }
  // Sent in pieces, the producer would write its output while the consumer
  // reads it (the plan cuts no op that another reads: this stays a guard).
  if (!producer.pieces.empty()) return Edge::kCopy;
  return Edge::kAlias;
}

std::string EdgeName(Edge edge, Activation activation) {
  static constexpr EnumName<Edge> kNames[] = {{Edge::kSeeded, ""},
                                              {Edge::kAlias, "alias"},
                                              {Edge::kFused, "fused"},
                                              {Edge::kCopy, "copy"},
                                              {Edge::kEpilogue, "epilogue"}};
  const std::string name = NameOf(kNames, edge);
  return edge == Edge::kFused || edge == Edge::kEpilogue
             ? absl::StrCat(name, " ", ActivationName(activation))
             : name;
}

bool EpilogueFits(const PlannedOp& consumer, int consumer_degree, const PlannedOp& producer,
                  int producer_degree, DType dtype) {
  // cuBLASLt's GELU_AUX on 16-bit types, rows of whole 16-byte units (its
  // aux output's ld), as Hopper's kernels take it.
  if (consumer.op.activation != Activation::kGelu ||
      (dtype != DType::kBF16 && dtype != DType::kF16) ||
      LocalShapesFor(producer.op, producer_degree).y_cols % 8 != 0) {
    return false;
  }
  const bool gemm_writes_output =
      !IsCollectiveOnly(producer.op.type) && (producer_degree == 1 || IsGemmOnly(producer.op.type));
  if (!gemm_writes_output) return false;
  PlannedOp plain = consumer;
  plain.op.activation = Activation::kNone;
  return EdgeFor(plain, consumer_degree, producer, producer_degree, dtype) == Edge::kAlias;
}

namespace {

// A collective over one rank whose output is its input (OpContext::
// OutputAliasesInput): aliased, both are the producer's output.
bool OutputIsInput(const OpSpec& op, int degree) {
  return IsCollectiveOnly(op.type) && degree == 1;
}

// Device -> the producer's rank there.
std::map<int, int> RanksByDevice(OpContext& from) {
  std::map<int, int> ranks;
  for (int q = 0; q < from.tp(); ++q) ranks[from.rank(q).device] = q;
  return ranks;
}

}  // namespace

ops::BufferSizes OwnBufferSizes(Edge edge, const OpSpec& op, int degree, ops::BufferSizes sizes) {
  if (edge != Edge::kAlias) return sizes;
  sizes.a = 0;
  if (OutputIsInput(op, degree)) sizes.y = 0;
  return sizes;
}

ops::BufferSizes OwnBufferSizes(const Member& m, int degree, ops::BufferSizes sizes) {
  return OwnBufferSizes(m.edge, m.op, degree, sizes);
}

absl::Status WireEpilogue(Member& m) {
  if (m.edge != Edge::kEpilogue || m.input_from == nullptr) return absl::OkStatus();
  OpContext& ctx = *m.ctx;
  OpContext& from = *m.input_from->ctx;
  const std::map<int, int> from_rank = RanksByDevice(from);
  for (int r = 0; r < ctx.tp(); ++r) {
    const auto it = from_rank.find(ctx.rank(r).device);
    if (it == from_rank.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          m.op.id, ": its input ", m.op.input, " has no rank on device ", ctx.rank(r).device));
    }
    from.SetEpilogue(it->second, ctx.rank(r).a, m.op.activation);
  }
  return absl::OkStatus();
}

absl::Status AliasInput(Member& m) {
  if (m.edge != Edge::kAlias || m.input_from == nullptr) return absl::OkStatus();
  OpContext& ctx = *m.ctx;
  OpContext& from = *m.input_from->ctx;
  const std::map<int, int> from_rank = RanksByDevice(from);
  const bool output_is_input = OutputIsInput(m.op, ctx.group_size());
  for (int r = 0; r < ctx.tp(); ++r) {
    const auto it = from_rank.find(ctx.rank(r).device);
    if (it == from_rank.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          m.op.id, ": its input ", m.op.input, " has no rank on device ", ctx.rank(r).device));
    }
    const engine::BufferId y = from.rank(it->second).y;
    RETURN_IF_ERROR(
        ctx.UseTensors(r, y, engine::kNoBuffer, output_is_input ? y : engine::kNoBuffer));
  }
  return absl::OkStatus();
}

// Member m's input made from its producer's output on m's compute streams:
// each of m's ranks reads what the producer's rank on the same device wrote,
// through m's activation, cast to m's input dtype (fp8: with the chain's
// scale). An alias reads it where it is, and the producer's GEMM epilogue
// wrote an epilogue edge's: the event alone marks it ready, on
// the stream that is past the producer there (the main stream, or a side
// stream forked from it after the producer; a deferred producer joined
// before its consumer), as the pass's end would.
absl::Status EnqueueWiredInput(Member& m) {
  if (m.input_from == nullptr) return absl::OkStatus();
  OpContext& ctx = *m.ctx;
  OpContext& from = *m.input_from->ctx;
  const std::map<int, int> from_rank = RanksByDevice(from);
  const LocalShapes& out = from.shapes();
  const LocalShapes& in = ctx.shapes();
  for (int r = 0; r < ctx.tp(); ++r) {
    ops::RankState& rank = ctx.rank(r);
    if (EdgeRunsAPass(m.edge)) {
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
    }
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

MainStreams MainStreamsOf(OpContext& main) {
  MainStreams streams;
  for (int r = 0; r < main.tp(); ++r) streams[main.rank(r).device] = main.rank(r).compute;
  return streams;
}

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

bool Unsent(const Member& m) { return static_cast<int>(m.sent) < Pieces(m); }

absl::Status JoinBefore(std::vector<Member>& members, const std::string& id,
                        const MainStreams& main) {
  for (size_t i = 0; i < members.size(); ++i) {
    Member& m = members[i];
    if (!m.deferred || m.join_before != id) continue;
    while (Unsent(m)) RETURN_IF_ERROR(SendDeferred(m, main));
    for (int q = 0; q < m.ctx->tp(); ++q) {
      RETURN_IF_ERROR(m.ctx->Wait(main.at(m.ctx->rank(q).device), q, ops::EventKind::kLayerDone));
    }
  }
  return absl::OkStatus();
}

}  // namespace overlap::runner
