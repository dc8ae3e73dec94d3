#include "server/ops/op_context.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace overlap::ops {

using engine::BufferId;
using engine::BufferRef;
using engine::MatrixRef;
using engine::StreamId;

BufferSizes BuffersFor(const OpSpec& op, int tp, const Schedule& s) {
  const LocalShapes sh = LocalShapesFor(op, tp);
  BufferSizes b;
  b.a = sh.a_rows * sh.a_cols;
  b.w = sh.w_rows * sh.w_cols;
  b.y = sh.y_rows * sh.y_cols;
  // The unchunked baselines (GEMM alone, comm alone on either transport) run
  // for every op, so the full buffers and the receive slots are always there.
  const int64_t rows_per_rank = op.m / tp;
  const int64_t chunk_rows = MaxPieceRows(rows_per_rank, std::max(1, s.chunks));
  const bool chunked = s.mode == OverlapMode::kChunked;
  b.slot_count = tp - 1;
  switch (op.type) {
    case OpType::kAgGemm:
      b.full = op.m * op.k;
      b.slot_count = 0;
      if (chunked) b.pingpong = tp * chunk_rows * op.k;
      break;
    case OpType::kGemmRs:
      b.full = op.m * op.n;
      b.slots = rows_per_rank * op.n;
      if (chunked) b.pingpong = tp * chunk_rows * op.n;
      break;
    case OpType::kGemmAr:
      b.slots = rows_per_rank * op.n;
      break;
    case OpType::kAllGather:
    case OpType::kGemm:
      b.slot_count = 0;
      break;
    case OpType::kReduceScatter:
    case OpType::kAllReduce:
      b.slots = rows_per_rank * op.n;  // p2p reductions pull peers' blocks here
      break;
  }
  // The collective's own buffers while the GEMM alone runs beside it; a
  // collective alone has no GEMM and a GEMM alone no collective, so no such
  // measurement.
  if (tp > 1 && !IsCollectiveOnly(op.type) && !IsGemmOnly(op.type))
    b.spare = op.type == OpType::kGemmAr ? b.y : b.full;
  if (b.slot_count == 0) b.slots = 0;
  return b;
}

BufferDTypes BufferDTypesFor(OpType type, DType dtype) {
  const DType reduced = GemmOutputDType(dtype);
  const bool sums = type == OpType::kReduceScatter || type == OpType::kAllReduce;
  BufferDTypes d;
  d.a = sums ? reduced : dtype;
  d.w = dtype;
  d.y = type == OpType::kAllGather ? dtype : reduced;
  d.full = type == OpType::kAgGemm ? dtype : reduced;
  d.slots = reduced;
  d.scales = dtype == DType::kFP8 && !IsCollectiveOnly(type);
  return d;
}

double BufferBytes(const BufferSizes& s, const BufferDTypes& d) {
  auto bytes = [](int64_t elements, DType dtype) {
    return static_cast<double>(elements) * static_cast<double>(DTypeSize(dtype));
  };
  return bytes(s.a, d.a) + bytes(s.w, d.w) + bytes(s.y, d.y) +
         bytes(2 * s.pingpong + s.full + s.spare, d.full) +
         static_cast<double>(s.slot_count) * bytes(s.slots, d.slots) +
         (d.scales ? 2.0 * engine::kGemmScaleAlignment : 0.0);
}

BufferSizes MaxSizes(const BufferSizes& a, const BufferSizes& b) {
  BufferSizes m;
  m.a = std::max(a.a, b.a);
  m.w = std::max(a.w, b.w);
  m.y = std::max(a.y, b.y);
  m.full = std::max(a.full, b.full);
  m.pingpong = std::max(a.pingpong, b.pingpong);
  m.slots = std::max(a.slots, b.slots);
  m.slot_count = std::max(a.slot_count, b.slot_count);
  m.spare = std::max(a.spare, b.spare);
  return m;
}

OpContext::OpContext(engine::Engine& engine, const OpSpec& op, DType dtype, int group_size,
                     const Mesh& mesh)
    : engine_(&engine),
      op_(op),
      dtype_(dtype),
      shapes_(LocalShapesFor(op, group_size)),
      group_size_(group_size),
      mesh_(mesh) {}

absl::StatusOr<std::unique_ptr<OpContext>> OpContext::Create(engine::Engine& engine,
                                                             const OpSpec& op, DType dtype,
                                                             const std::vector<int>& devices,
                                                             const BufferSizes& sizes,
                                                             const RankLayout& layout) {
  const int count = static_cast<int>(devices.size());
  const int group_size = layout.group_size > 0 ? layout.group_size : count;
  if (count == 0 || count % group_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op.id, ": ", count, " devices do not form groups of ", group_size));
  }
  std::unique_ptr<OpContext> ctx(new OpContext(engine, op, dtype, group_size, layout.mesh));
  RETURN_IF_ERROR(ctx->Allocate(devices, sizes));
  return ctx;
}

absl::Status OpContext::ForEachGroup(absl::FunctionRef<absl::Status()> fn) {
  if (group_ >= 0) return fn();
  const std::vector<int> all = view_;
  absl::Status status;
  for (int g = 0; g < groups() && status.ok(); ++g) {
    group_ = g;
    view_.clear();
    for (int r = 0; r < group_size_; ++r) view_.push_back(g * group_size_ + r);
    status = fn();
  }
  group_ = -1;
  view_ = all;
  return status;
}

absl::Status OpContext::InView(const std::vector<int>& ranks,
                               absl::FunctionRef<absl::Status()> fn) {
  std::vector<int> seen;
  for (int r : ranks) seen.push_back(view_[r]);
  std::swap(view_, seen);
  absl::Status status = fn();
  std::swap(view_, seen);
  return status;
}

// A collective over one rank leaves its input as it is: its output is that
// input (an alias, no copy and no collective), where their layouts agree.
bool OpContext::OutputIsInput(const BufferSizes& sizes, const BufferDTypes& dtypes) const {
  return IsCollectiveOnly(op_.type) && group_size_ == 1 && sizes.a > 0 && sizes.y > 0 &&
         sizes.y <= sizes.a && dtypes.y == dtypes.a;
}

absl::Status OpContext::Allocate(const std::vector<int>& devices, const BufferSizes& sizes) {
  sizes_ = sizes;
  ranks_.resize(devices.size());
  view_.clear();
  for (size_t r = 0; r < devices.size(); ++r) view_.push_back(static_cast<int>(r));
  const BufferDTypes dt = BufferDTypesFor(op_.type, dtype_);
  auto alloc = [&](int device, int64_t elements, DType dtype, BufferId* out) -> absl::Status {
    if (elements <= 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(*out,
                     engine_->Allocate(device, static_cast<size_t>(elements) * DTypeSize(dtype)));
    owned_.push_back(*out);
    buffer_dtypes_[*out] = dtype;
    return absl::OkStatus();
  };
  for (size_t r = 0; r < devices.size(); ++r) {
    RankState& rs = ranks_[r];
    rs.device = devices[r];
    rs.compute = engine_->GetStream(rs.device, engine::StreamRole::kCompute);
    rs.comm = engine_->GetStream(rs.device, engine::StreamRole::kComm);
    RETURN_IF_ERROR(alloc(rs.device, sizes.a, dt.a, &rs.a));
    RETURN_IF_ERROR(alloc(rs.device, sizes.w, dt.w, &rs.w));
    if (OutputIsInput(sizes, dt)) {
      rs.y = rs.a;
    } else {
      RETURN_IF_ERROR(alloc(rs.device, sizes.y, dt.y, &rs.y));
    }
    RETURN_IF_ERROR(alloc(rs.device, sizes.full, dt.full, &rs.full));
    RETURN_IF_ERROR(alloc(rs.device, sizes.pingpong, dt.full, &rs.pingpong[0]));
    RETURN_IF_ERROR(alloc(rs.device, sizes.pingpong, dt.full, &rs.pingpong[1]));
    // The collective's side while the GEMM alone runs: gathered A, a partial or Y.
    RETURN_IF_ERROR(alloc(rs.device, sizes.spare, dt.full, &rs.spare));
    rs.slots.assign(sizes.slot_count, engine::kNoBuffer);
    for (auto& slot : rs.slots) RETURN_IF_ERROR(alloc(rs.device, sizes.slots, dt.slots, &slot));
    if (dt.scales) RETURN_IF_ERROR(alloc(rs.device, 2 * kScaleStride, DType::kF32, &rs.scales));
  }
  return absl::OkStatus();
}

absl::Status OpContext::MoveToSideStreams() {
  if (engine_->StreamsPerRole() < 2) {
    return absl::FailedPreconditionError(
        absl::StrCat(engine_->Name(), " backend has one stream per role: no side stream"));
  }
  for (RankState& rs : ranks_) {
    rs.compute = engine_->GetStream(rs.device, engine::StreamRole::kComm, 1);
    rs.comm = rs.compute;
  }
  channel_ = 1;
  return absl::OkStatus();
}

void OpContext::MoveToDeferredLane() {
  for (RankState& rs : ranks_) {
    rs.compute = engine_->GetStream(rs.device, engine::StreamRole::kDeferred, 0);
    rs.comm = rs.compute;
  }
  channel_ = engine::kDeferredLaneChannel;
}

OpContext::~OpContext() {
  for (auto& [key, event] : events_) engine_->DestroyEvent(event);
  for (BufferId b : owned_) engine_->Free(b);
}

absl::Status OpContext::UseTensors(int r, BufferId a, BufferId w, BufferId y) {
  if (r < 0 || r >= static_cast<int>(ranks_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(op_.id, ": UseTensors: rank ", r,
                                                   " is out of range (the op has ", ranks_.size(),
                                                   " ranks)"));
  }
  const BufferDTypes dt = BufferDTypesFor(op_.type, dtype_);
  const std::pair<BufferId, DType> given[] = {{a, dt.a}, {w, dt.w}, {y, dt.y}};
  // A buffer's dtype says how Rows sizes its elements: one buffer may not
  // stand for two tensors of different dtypes.
  for (const auto& [buffer, dtype] : given) {
    if (buffer == engine::kNoBuffer) continue;
    for (const auto& [other, other_dtype] : given) {
      if (other == buffer && other_dtype != dtype) {
        return absl::InvalidArgumentError(
            absl::StrCat(op_.id, ": UseTensors: rank ", r, ": buffer ", buffer, " given as both ",
                         DTypeName(dtype), " and ", DTypeName(other_dtype), " tensors"));
      }
    }
  }
  RankState& rs = ranks_[r];
  BufferId* slots[] = {&rs.a, &rs.w, &rs.y};
  for (int i = 0; i < 3; ++i) {
    if (given[i].first == engine::kNoBuffer) continue;
    *slots[i] = given[i].first;
    buffer_dtypes_[given[i].first] = given[i].second;
  }
  return absl::OkStatus();
}

std::vector<int> OpContext::devices() const {
  std::vector<int> out;
  for (int index : view_) out.push_back(ranks_[index].device);
  return out;
}

DType OpContext::DTypeOf(BufferId buffer) const {
  auto it = buffer_dtypes_.find(buffer);
  return it == buffer_dtypes_.end() ? dtype_ : it->second;
}

BufferRef OpContext::Rows(BufferId buffer, int64_t row, int64_t rows, int64_t cols) const {
  const size_t es = DTypeSize(DTypeOf(buffer));
  return BufferRef{buffer, static_cast<size_t>(row * cols) * es,
                   static_cast<size_t>(rows * cols) * es};
}

MatrixRef OpContext::Matrix(BufferId buffer, int64_t row, int64_t ld) const {
  return MatrixRef{buffer, static_cast<size_t>(row * ld), ld};
}

MatrixRef OpContext::Weights(int r) const {
  const bool transposed = WeightsStoredTransposed(dtype_);
  return MatrixRef{At(r).w, 0, transposed ? shapes_.w_rows : shapes_.w_cols};
}

BufferRef OpContext::ScaleOf(int r, int tensor) const {
  return Rows(At(r).scales, tensor * kScaleStride, 1, 1);
}

void OpContext::SetEpilogue(int r, engine::BufferId out, Activation activation) {
  rank(r).epilogue_out = out;
  epilogue_ = activation;
}

engine::GemmArgs OpContext::WeightsGemm(int r) const {
  engine::GemmArgs g;
  g.dtype = dtype_;
  g.n = shapes_.w_cols;
  g.k = shapes_.w_rows;
  g.b = Weights(r);
  g.beside_collective = gemms_beside_collective_;
  const BufferId scales = At(r).scales;
  if (scales != engine::kNoBuffer) {
    g.a_scale = ScaleOf(r, 0);
    g.b_scale = ScaleOf(r, 1);
  }
  return g;
}

namespace {

// (rank, kind, index, step) as one key: 12, 8, 24 and 20 bits.
uint64_t EventKey(int r, EventKind kind, int index, int step) {
  return (static_cast<uint64_t>(r) << 52) | (static_cast<uint64_t>(kind) << 44) |
         (static_cast<uint64_t>(index & 0xFFFFFF) << 20) | static_cast<uint64_t>(step & 0xFFFFF);
}

}  // namespace

absl::StatusOr<engine::EventId> OpContext::Event(int r, EventKind kind, int index, int step) {
  // Keyed by the rank's index among all the op's ranks: each group's are its own.
  auto [it, inserted] =
      events_.try_emplace(EventKey(view_[r], kind, index, step), engine::kNoEvent);
  if (inserted) {
    absl::StatusOr<engine::EventId> event = engine_->CreateEvent(At(r).device);
    if (!event.ok()) {
      events_.erase(it);
      return event.status();
    }
    it->second = *event;
  }
  return it->second;
}

absl::Status OpContext::Record(int r, StreamId stream, EventKind kind, int index, int step) {
  ASSIGN_OR_RETURN(engine::EventId event, Event(r, kind, index, step));
  return engine_->RecordEvent(event, stream);
}

absl::Status OpContext::Wait(StreamId stream, int event_rank, EventKind kind, int index, int step) {
  ASSIGN_OR_RETURN(engine::EventId event, Event(event_rank, kind, index, step));
  return engine_->WaitEvent(stream, event);
}

absl::Status OpContext::WaitAll(StreamId stream, EventKind kind, int index, int step) {
  for (int q = 0; q < tp(); ++q) RETURN_IF_ERROR(Wait(stream, q, kind, index, step));
  return absl::OkStatus();
}

absl::Status OpContext::ForkComm(Transport transport) {
  gemms_beside_collective_ = transport == Transport::kNccl && tp() > 1;
  for (int r = 0; r < tp(); ++r) {
    RETURN_IF_ERROR(Record(r, At(r).compute, EventKind::kFork));
    RETURN_IF_ERROR(Wait(At(r).comm, r, EventKind::kFork));
  }
  return absl::OkStatus();
}

absl::Status OpContext::JoinComm() {
  gemms_beside_collective_ = false;
  for (int r = 0; r < tp(); ++r) {
    RETURN_IF_ERROR(Record(r, At(r).comm, EventKind::kJoin));
    RETURN_IF_ERROR(Wait(At(r).compute, r, EventKind::kJoin));
  }
  return absl::OkStatus();
}

absl::Status EnqueueByMode(OpContext& ctx, const Schedule& s, const ModeSchedules& schedules) {
  switch (s.mode) {
    case OverlapMode::kSerial:
      return schedules.serial(ctx, s.transport);
    case OverlapMode::kBulk:
      return schedules.bulk(ctx, s.transport);
    case OverlapMode::kChunked:
      return schedules.chunked(ctx, s.transport, s.chunks);
    case OverlapMode::kRing:
      return schedules.ring(ctx, s.transport, s.chunks);
    case OverlapMode::kAuto:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(schedules.op, ": mode auto must be resolved before enqueueing"));
}

}  // namespace overlap::ops
