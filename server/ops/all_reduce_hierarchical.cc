#include "server/ops/all_reduce_hierarchical.h"

#include "absl/strings/str_cat.h"
#include "common/checked_size.h"
#include "common/status_macros.h"

namespace overlap::ops {
namespace {

using engine::BufferId;
using engine::BufferRef;

// The ranks of replica d's tp group and of tp rank t's dp group, as indices
// among the world op's ranks (tp-major).
std::vector<int> TpGroup(const Mesh& mesh, int d) {
  std::vector<int> ranks;
  for (int t = 0; t < mesh.tp; ++t) ranks.push_back(d * mesh.tp + t);
  return ranks;
}
std::vector<int> DpGroup(const Mesh& mesh, int t) {
  std::vector<int> ranks;
  for (int d = 0; d < mesh.dp; ++d) ranks.push_back(d * mesh.tp + t);
  return ranks;
}

class Hierarchical {
 public:
  Hierarchical(OpContext& ctx, Transport transport, On on, const std::vector<BufferId>& src,
               const std::vector<BufferId>& dst, int64_t row, int64_t rows, int64_t cols, int tag)
      : ctx_(ctx),
        mesh_(ctx.mesh()),
        transport_(transport),
        on_(on),
        src_(src),
        dst_(dst),
        row_(row),
        cols_(cols),
        tag_(tag),
        pieces_(transport == Transport::kP2p ? mesh_.dp : 1),
        piece_rows_(rows / pieces_),
        block_(piece_rows_ / mesh_.tp) {}

  absl::Status Run() {
    // 1. Inside each tp group: rank t gets the sum of block t of every piece.
    for (int d = 0; d < mesh_.dp; ++d) {
      RETURN_IF_ERROR(InGroup(TpGroup(mesh_, d), [&](int t, int piece, int /*t_of*/) {
        return ctx_.Rows(src_[Global(d, t)], PieceRow(piece), piece_rows_, cols_);
      }, [&](int t, int piece) { return Block(Global(d, t), piece, t); }, Phase::kReduceScatter));
    }
    RETURN_IF_ERROR(PhaseDone(1));
    // 2. Across the replicas: tp rank t's blocks summed over its dp group.
    for (int t = 0; t < mesh_.tp; ++t) {
      const std::vector<int> group = DpGroup(mesh_, t);
      RETURN_IF_ERROR(WaitForPeers(group, 1));
      RETURN_IF_ERROR(ctx_.InView(group, [&]() -> absl::Status {
        std::vector<BufferId> in_place;
        for (int d = 0; d < mesh_.dp; ++d) in_place.push_back(dst_[Global(d, t)]);
        for (int piece = 0; piece < pieces_; ++piece) {
          RETURN_IF_ERROR(AllReduceRows(ctx_, transport_, on_, in_place,
                                        PieceRow(piece) + t * block_, block_, cols_,
                                        tag_ * 64 + piece));
        }
        return absl::OkStatus();
      }));
    }
    RETURN_IF_ERROR(PhaseDone(2));
    // 3. Inside each tp group: every rank gathers the others' blocks.
    for (int d = 0; d < mesh_.dp; ++d) {
      RETURN_IF_ERROR(WaitForPeers(TpGroup(mesh_, d), 2));
      RETURN_IF_ERROR(InGroup(TpGroup(mesh_, d), [&](int t, int piece, int) {
        return Block(Global(d, t), piece, t);
      }, [&](int t, int piece) {
        return ctx_.Rows(dst_[Global(d, t)], PieceRow(piece), piece_rows_, cols_);
      }, Phase::kAllGather));
    }
    return absl::OkStatus();
  }

 private:
  enum class Phase { kReduceScatter, kAllGather };

  int Global(int d, int t) const { return d * mesh_.tp + t; }
  int64_t PieceRow(int piece) const { return row_ + piece * piece_rows_; }
  // Rank `global`'s block t of a piece in its dst.
  BufferRef Block(int global, int piece, int t) const {
    return ctx_.Rows(dst_[global], PieceRow(piece) + t * block_, block_, cols_);
  }

  // One collective per piece over `group` (a tp group), its buffers by
  // position in the group.
  template <typename Send, typename Recv>
  absl::Status InGroup(const std::vector<int>& group, Send send, Recv recv, Phase phase) {
    return ctx_.InView(group, [&]() -> absl::Status {
      for (int piece = 0; piece < pieces_; ++piece) {
        std::vector<BufferRef> s, r;
        for (int t = 0; t < mesh_.tp; ++t) {
          s.push_back(send(t, piece, t));
          r.push_back(recv(t, piece));
        }
        RETURN_IF_ERROR(phase == Phase::kReduceScatter
                            ? ReduceScatter(ctx_, transport_, on_, s, r)
                            : AllGather(ctx_, transport_, on_, s, r));
      }
      return absl::OkStatus();
    });
  }

  // The copy engines pull from peers, which must have finished the phase
  // before; a library collective waits for its peers itself.
  absl::Status PhaseDone(int phase) {
    if (transport_ != Transport::kP2p) return absl::OkStatus();
    for (int r = 0; r < ctx_.tp(); ++r) {
      RETURN_IF_ERROR(ctx_.Record(r, StreamOf(ctx_, r, on_), EventKind::kArHierarchical, tag_, phase));
    }
    return absl::OkStatus();
  }
  absl::Status WaitForPeers(const std::vector<int>& group, int phase) {
    if (transport_ != Transport::kP2p) return absl::OkStatus();
    for (int r : group) {
      for (int q : group) {
        if (q == r) continue;
        RETURN_IF_ERROR(
            ctx_.Wait(StreamOf(ctx_, r, on_), q, EventKind::kArHierarchical, tag_, phase));
      }
    }
    return absl::OkStatus();
  }

  OpContext& ctx_;
  const Mesh mesh_;
  const Transport transport_;
  const On on_;
  const std::vector<BufferId>& src_;
  const std::vector<BufferId>& dst_;
  const int64_t row_;
  const int64_t cols_;
  const int tag_;
  const int pieces_;
  const int64_t piece_rows_;
  const int64_t block_;
};

}  // namespace

absl::Status AllReduceHierarchical(OpContext& ctx, Transport transport, On on,
                                   const std::vector<BufferId>& src,
                                   const std::vector<BufferId>& dst, int64_t row, int64_t rows,
                                   int64_t cols, int tag) {
  const Mesh& mesh = ctx.mesh();
  if (mesh.tp < 2 || mesh.dp < 2 || !MeshCovers(mesh.tp, mesh.dp, ctx.tp())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all-reduce hierarchical needs the world of a mesh with tp > 1 and dp > 1 (", ctx.tp(),
        " ranks, mesh ", mesh.tp, " x ", mesh.dp, ")"));
  }
  if (rows % ctx.tp() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all-reduce hierarchical: ", rows, " rows do not divide over tp x dp = ", ctx.tp()));
  }
  if (src == dst) {
    return absl::InvalidArgumentError("all-reduce hierarchical runs out of place only");
  }
  return Hierarchical(ctx, transport, on, src, dst, row, rows, cols, tag).Run();
}

}  // namespace overlap::ops
