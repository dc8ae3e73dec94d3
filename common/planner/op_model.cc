#include "common/planner/op_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/checked_size.h"
#include "common/planner/two_lanes.h"

namespace overlap::planner {

namespace {

using ops::Schedule;

// The GEMM one rank runs for the whole op: rows x n x k.
struct GemmDims {
  int64_t rows = 0, n = 0, k = 0;
};

GemmDims RankGemm(const OpShape& op) {
  const int tp = std::max(op.tp, 1);
  switch (op.type) {
    case OpType::kAgGemm: return {op.m, op.n / tp, op.k};
    case OpType::kGemmRs:
    case OpType::kGemmAr: return {op.m, op.n, op.k / tp};
    case OpType::kGemm: return op.row_parallel ? GemmDims{op.m, op.n, op.k / tp}
                                               : GemmDims{op.m, op.n / tp, op.k};
    default: return {};
  }
}

// The op's collective and its whole buffer in bytes, as commbench counts it.
Collective OpCollective(OpType type) {
  switch (type) {
    case OpType::kAgGemm:
    case OpType::kAllGather: return Collective::kAllGather;
    case OpType::kGemmRs:
    case OpType::kReduceScatter: return Collective::kReduceScatter;
    default: return Collective::kAllReduce;
  }
}

int64_t CollectiveBytes(const OpShape& op) {
  switch (op.type) {
    case OpType::kAgGemm: return op.m * op.k * int64_t(DTypeSize(op.dtype));
    case OpType::kGemmRs:
    case OpType::kGemmAr: return op.m * op.n * int64_t(DTypeSize(GemmOutputDType(op.dtype)));
    default: return op.m * op.n * int64_t(DTypeSize(op.dtype));
  }
}

// Builds one schedule's lanes. Each Add returns the task's index.
class LaneBuilder {
 public:
  LaneBuilder(const CostModel& model, const OpShape& op, const Schedule& schedule)
      : model_(model), op_(op), schedule_(schedule), gemm_(RankGemm(op)),
        collective_(OpCollective(op.type)), bytes_(CollectiveBytes(op)) {}

  absl::StatusOr<int> Gemm(int64_t rows, bool piece, std::vector<int> deps = {}) {
    absl::StatusOr<double> ms = model_.GemmMs(rows, gemm_.n, gemm_.k);
    if (!ms.ok()) return ms.status();
    const double work = *ms + (piece ? model_.PieceOverheadMs() : 0);
    largest_.gemm_ms = std::max(largest_.gemm_ms, work * model_.Slowdown(schedule_.transport));
    return Add(LaneTask{false, work, std::move(deps)});
  }
  // The op's own collective over a share of its buffer.
  absl::StatusOr<int> Transfer(int64_t bytes, bool piece, std::vector<int> deps = {}) {
    return AddTransfer(collective_, bytes, op_.tp, piece, std::move(deps));
  }
  // One point-to-point hop of `bytes` (a ring step): an all-gather of two
  // ranks moves as much each way.
  absl::StatusOr<int> Hop(int64_t bytes, std::vector<int> deps) {
    return AddTransfer(Collective::kAllGather, 2 * bytes, 2, true, std::move(deps));
  }
  // An all-gather of `bytes` per rank to every rank.
  absl::StatusOr<int> Gather(int64_t bytes_per_rank, std::vector<int> deps) {
    return AddTransfer(Collective::kAllGather, bytes_per_rank * op_.tp, op_.tp, true,
                       std::move(deps));
  }

  // A short compute step after `deps` (adding what arrived): one piece's cost.
  absl::StatusOr<int> Join(std::vector<int> deps) {
    return Add(LaneTask{false, model_.PieceOverheadMs(), std::move(deps)});
  }

  int64_t rows() const { return gemm_.rows; }
  int64_t bytes() const { return bytes_; }
  int64_t row_bytes() const { return bytes_ / std::max<int64_t>(op_.m, 1); }
  std::vector<LaneTask>& tasks() { return tasks_; }
  const PiecePrediction& largest() const { return largest_; }

 private:
  int Add(LaneTask task) {
    tasks_.push_back(std::move(task));
    return static_cast<int>(tasks_.size()) - 1;
  }
  // Over NCCL each transfer is a collective (or a send/receive pair) with its
  // measured latency; over p2p, copy-engine copies that stream at the
  // bandwidth the copies reached, paying the per-piece cost instead.
  absl::StatusOr<int> AddTransfer(Collective collective, int64_t bytes, int ranks, bool piece,
                                  std::vector<int> deps) {
    const bool copies = schedule_.transport == Transport::kP2p;
    absl::StatusOr<double> ms =
        copies ? model_.StreamMs(collective, schedule_.transport, bytes, ranks, op_.nodes)
               : model_.TransferMs(collective, schedule_.transport, bytes, ranks, op_.nodes);
    piece = piece || copies;
    if (!ms.ok()) return ms.status();
    const double work = *ms + (piece ? model_.PieceOverheadMs() : 0);
    largest_.transfer_ms = std::max(largest_.transfer_ms, work);
    return Add(LaneTask{true, work, std::move(deps)});
  }

  const CostModel& model_;
  const OpShape& op_;
  const Schedule& schedule_;
  GemmDims gemm_;
  Collective collective_;
  int64_t bytes_;
  std::vector<LaneTask> tasks_;
  PiecePrediction largest_;
};

#define PLAN_ASSIGN(lhs, expr)          \
  auto lhs##_or = (expr);               \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  const int lhs = *lhs##_or

absl::Status Serial(LaneBuilder& b, OpType type) {
  if (type == OpType::kAgGemm) {
    PLAN_ASSIGN(gather, b.Transfer(b.bytes(), false));
    return b.Gemm(b.rows(), false, {gather}).status();
  }
  PLAN_ASSIGN(gemm, b.Gemm(b.rows(), false));
  return b.Transfer(b.bytes(), false, {gemm}).status();
}

// server/ops: the local shard's GEMM beside one collective, the rest after.
absl::Status Bulk(LaneBuilder& b, OpType type, int tp) {
  const int64_t own = b.rows() / tp, others = b.rows() - own;
  if (type == OpType::kAgGemm) {
    PLAN_ASSIGN(gather, b.Transfer(b.bytes(), false));
    PLAN_ASSIGN(local, b.Gemm(own, false));
    return b.Gemm(others, true, {gather, local}).status();
  }
  PLAN_ASSIGN(peers, b.Gemm(others, false));
  if (type == OpType::kGemmRs) {
    PLAN_ASSIGN(exchange, b.Transfer(b.bytes(), false, {peers}));
    PLAN_ASSIGN(local, b.Gemm(own, true));
    return b.Join({exchange, local}).status();  // the arrivals are added last
  }
  PLAN_ASSIGN(first, b.Transfer(b.bytes() - b.bytes() / tp, false, {peers}));
  PLAN_ASSIGN(last, b.Gemm(own, true));
  return b.Transfer(b.bytes() / tp, true, {first, last}).status();
}

// Chunk c's collective and GEMM alternate through two buffers, one chunk ahead.
absl::Status Chunked(LaneBuilder& b, OpType type, int chunks) {
  const int64_t rows = b.rows() / chunks, bytes = b.bytes() / chunks;
  std::vector<int> gemm(chunks), comm(chunks);
  for (int c = 0; c < chunks; ++c) {
    if (type == OpType::kAgGemm) {
      std::vector<int> deps;
      if (c >= 2) deps.push_back(gemm[c - 2]);  // its buffer is free again
      PLAN_ASSIGN(t, b.Transfer(bytes, true, deps));
      comm[c] = t;
      PLAN_ASSIGN(g, b.Gemm(rows, true, {comm[c]}));
      gemm[c] = g;
    } else {
      std::vector<int> deps;
      if (c >= 2) deps.push_back(comm[c - 2]);
      PLAN_ASSIGN(g, b.Gemm(rows, true, deps));
      gemm[c] = g;
      PLAN_ASSIGN(t, b.Transfer(bytes, true, {gemm[c]}));
      comm[c] = t;
    }
  }
  return absl::OkStatus();
}

// The fused ring: shards move in `chunks` pieces per step, each piece's GEMM
// starting as soon as its data is there (all-gather), or each piece sent as
// soon as its GEMM is done and the own block's pieces added onto what arrived
// (reduce-scatter; gemm_ar then gathers each reduced piece).
absl::Status Ring(LaneBuilder& b, OpType type, int tp, int chunks) {
  const int64_t rows = b.rows() / tp / chunks;
  const int64_t piece_bytes = rows * (type == OpType::kAgGemm ? b.bytes() / b.rows() : b.row_bytes());
  if (type == OpType::kAgGemm) {
    for (int c = 0; c < chunks; ++c) {
      PLAN_ASSIGN(g, b.Gemm(rows, true));
      (void)g;
    }
    for (int step = 1; step < tp; ++step) {
      for (int c = 0; c < chunks; ++c) {
        PLAN_ASSIGN(hop, b.Hop(piece_bytes, {}));
        PLAN_ASSIGN(g, b.Gemm(rows, true, {hop}));
        (void)g;
      }
    }
    return absl::OkStatus();
  }
  std::vector<int> arrived(chunks);
  for (int step = 1; step < tp; ++step) {
    for (int c = 0; c < chunks; ++c) {
      PLAN_ASSIGN(g, b.Gemm(rows, true));
      PLAN_ASSIGN(hop, b.Hop(piece_bytes, {g}));
      arrived[c] = hop;
    }
  }
  for (int c = 0; c < chunks; ++c) {
    PLAN_ASSIGN(own, b.Gemm(rows, true, {arrived[c]}));
    if (type == OpType::kGemmAr) {
      PLAN_ASSIGN(gather, b.Gather(piece_bytes, {own}));
      (void)gather;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SchedulePrediction> PredictCollectiveAlone(const CostModel& model, const OpShape& op,
                                                          const Schedule& schedule) {
  if (op.algorithm == AllReduceAlgorithm::kHierarchical ||
      schedule.algorithm == AllReduceAlgorithm::kHierarchical) {
    return absl::UnimplementedError("the planner has no model of the hierarchical all-reduce");
  }
  absl::StatusOr<double> ms = model.TransferMs(OpCollective(op.type), schedule.transport,
                                               CollectiveBytes(op), op.tp, op.nodes);
  if (!ms.ok()) return absl::UnimplementedError(std::string(ms.status().message()));
  SchedulePrediction out;
  out.schedule = schedule;
  // A parameter server pulls every rank's share through its own link and
  // pushes the sum back out: N times the ring's bytes through one link.
  const double factor = schedule.algorithm == AllReduceAlgorithm::kParameterServer ? op.tp : 1;
  out.step_ms = out.comm_alone_ms = out.serial_ms = *ms * factor;
  out.piece.transfer_ms = out.step_ms;
  return out;
}

}  // namespace

absl::StatusOr<SchedulePrediction> PredictSchedule(const CostModel& model, const OpShape& op,
                                                   const ops::Schedule& schedule) {
  if (schedule.transport == Transport::kDirect) {
    return absl::UnimplementedError(
        "the planner has no model of direct stores (no transfer to time: the GEMM writes the "
        "peer's memory)");
  }
  if (IsCollectiveOnly(op.type)) return PredictCollectiveAlone(model, op, schedule);
  const GemmDims dims = RankGemm(op);
  absl::StatusOr<double> gemm_alone = model.GemmMs(dims.rows, dims.n, dims.k);
  if (!gemm_alone.ok()) return absl::UnimplementedError(std::string(gemm_alone.status().message()));
  SchedulePrediction out;
  out.schedule = schedule;
  out.gemm_alone_ms = *gemm_alone;
  if (IsGemmOnly(op.type) || op.tp <= 1) {
    out.step_ms = out.serial_ms = out.gemm_alone_ms;
    out.piece.gemm_ms = out.gemm_alone_ms;
    out.hidden = 1;
    return out;
  }
  // The lanes hold a few tasks per piece: a ring's tp x chunks (both from the
  // user, chunks up to m/tp) sizes that list, and must neither wrap nor fill memory.
  const int64_t pieces = schedule.mode == OverlapMode::kRing
                             ? SaturatingMul(op.tp, schedule.chunks)
                             : static_cast<int64_t>(schedule.chunks);
  if (pieces > kMaxPlannedPieces) {
    return absl::UnimplementedError(absl::StrCat("the planner models at most ", kMaxPlannedPieces,
                                                 " pieces (this schedule has ", pieces, ")"));
  }
  absl::StatusOr<double> comm_alone = model.TransferMs(
      OpCollective(op.type), schedule.transport, CollectiveBytes(op), op.tp, op.nodes);
  if (!comm_alone.ok()) return absl::UnimplementedError(std::string(comm_alone.status().message()));
  out.comm_alone_ms = *comm_alone;
  out.serial_ms = out.gemm_alone_ms + out.comm_alone_ms;

  LaneBuilder b(model, op, schedule);
  absl::Status built;
  switch (schedule.mode) {
    case OverlapMode::kSerial: built = Serial(b, op.type); break;
    case OverlapMode::kBulk: built = Bulk(b, op.type, op.tp); break;
    case OverlapMode::kChunked:
      built = Chunked(b, op.type, schedule.chunks);
      out.pieces = schedule.chunks;
      break;
    case OverlapMode::kRing:
      built = Ring(b, op.type, op.tp, schedule.chunks);
      out.pieces = static_cast<int>(pieces);
      break;
    case OverlapMode::kAuto: return absl::InvalidArgumentError("auto is not a schedule");
  }
  if (!built.ok()) return absl::UnimplementedError(std::string(built.message()));
  const double slowdown = schedule.mode == OverlapMode::kSerial ? 1 : model.Slowdown(schedule.transport);
  out.step_ms = RunTwoLanes(b.tasks(), slowdown).step_ms;
  out.piece = b.largest();
  if (schedule.mode == OverlapMode::kSerial) {
    out.piece = PiecePrediction{out.gemm_alone_ms, b.largest().transfer_ms};
  } else if (out.comm_alone_ms > 0) {
    out.hidden = std::clamp(1 - (out.step_ms - out.gemm_alone_ms) / out.comm_alone_ms, 0.0, 1.0);
  }
  return out;
}

}  // namespace overlap::planner
