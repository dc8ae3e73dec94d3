#include "server/sessions/session_run.h"

#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/graph_validator.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace overlap::sessions {
namespace {

// How long past a command's inputs deadline a rank's stream may still be
// short of its inputs wait before the lanes call the inputs missing (a
// backend whose waits never fail: CUDA's).
constexpr int64_t kOverdueGraceNs = 100'000'000;

double Ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

// `op`'s rows cut into pieces of about `chunk_bytes` (`es` bytes an element),
// none when it is no larger than one.
std::vector<ops::RowRange> RowPieces(const OpSpec& op, int64_t chunk_bytes, int64_t es) {
  std::vector<ops::RowRange> pieces;
  if (chunk_bytes <= 0 || op.n <= 0 || op.m * op.n * es <= chunk_bytes) return pieces;
  const int64_t rows = std::max<int64_t>(1, chunk_bytes / (op.n * es));
  for (int64_t row = 0; row < op.m; row += rows) {
    pieces.push_back(ops::RowRange{row, std::min(rows, op.m - row)});
  }
  return pieces;
}

}  // namespace

int64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

SessionRun::SessionRun(engine::Engine& engine, LaneDevices& devices, SessionSetup setup,
                       uint64_t key, std::shared_ptr<SessionCountsBox> counts)
    : engine_(engine),
      shared_(*engine.Shared()),  // SessionLanes::Start checked it
      devices_(devices),
      setup_(std::move(setup)),
      key_(key),
      deferred_(setup_.priority == Priority::kDeferred),
      counts_(std::move(counts)) {}

absl::StatusOr<std::unique_ptr<SessionRun>> SessionRun::Create(
    engine::Engine& engine, LaneDevices& devices, SessionSetup setup, uint64_t key,
    std::shared_ptr<SessionCountsBox> counts, bool graphs) {
  // Made first, so that whatever the setup holds is released on any error.
  std::unique_ptr<SessionRun> run(
      new SessionRun(engine, devices, std::move(setup), key, std::move(counts)));
  RETURN_IF_ERROR(run->Check());
  RETURN_IF_ERROR(run->MakeContexts(graphs));
  return run;
}

absl::Status SessionRun::Check() const {
  const size_t op_count = setup_.graph.ops.size();
  if (op_count == 0 || setup_.schedules.size() != op_count) {
    return absl::InvalidArgumentError(absl::StrCat("session ", id(), ": ", setup_.schedules.size(),
                                                   " schedules for ", op_count, " ops"));
  }
  if (setup_.ranks.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("session ", id(), ": no ranks"));
  }
  for (const SessionRank& rank : setup_.ranks) {
    if (rank.ring == nullptr || rank.tensors.size() != op_count ||
        rank.signals == engine::kNoBuffer || rank.device < 0 ||
        rank.device >= engine_.DeviceCount()) {
      return absl::InvalidArgumentError(
          absl::StrCat("session ", id(), ": rank ", rank.rank,
                       " lacks its ring, its signals or a tensor of each op, or names no device"));
    }
  }
  return absl::OkStatus();
}

absl::Status SessionRun::MakeContexts(bool graphs) {
  const JobSpec& graph = setup_.graph;
  const int n = static_cast<int>(setup_.ranks.size());
  ASSIGN_OR_RETURN(layer_order_, TopologicalOrder(graph));
  ops_.resize(graph.ops.size());
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const OpSpec& spec = graph.ops[i];
    OpRun& op = ops_[i];
    op.spec = &spec;
    op.schedule = setup_.schedules[i];
    op.collective = spec.type != OpType::kGemm;
    const int group_size = GroupSize(graph.mesh, spec.group, n);
    std::vector<int> devices;
    for (const std::vector<int>& group : GroupsOf(graph.mesh, spec.group, n)) {
      for (int position : group) {
        op.session_rank.push_back(position);
        devices.push_back(setup_.ranks[position].device);
      }
    }
    // The client's tensors stand in for A, W and Y: the context allocates
    // only what the schedule adds (gathered A, partials, receive slots).
    ops::BufferSizes sizes = ops::BuffersFor(spec, group_size, op.schedule);
    sizes.a = sizes.w = sizes.y = 0;
    ASSIGN_OR_RETURN(op.ctx, ops::OpContext::Create(engine_, spec, graph.dtype, devices, sizes,
                                                    ops::RankLayout{group_size, graph.mesh}));
    if (deferred_) op.ctx->MoveToDeferredLane();
    for (size_t j = 0; j < op.session_rank.size(); ++j) {
      const RankTensors& t = setup_.ranks[op.session_rank[j]].tensors[i];
      RETURN_IF_ERROR(op.ctx->UseTensors(static_cast<int>(j), t.x, t.w, t.y));
    }
    for (size_t p = 0; p < graph.ops.size() && !spec.input.empty(); ++p) {
      if (graph.ops[p].id == spec.input) op.producer = static_cast<int>(p);
    }
    if (deferred_ && spec.type == OpType::kAllReduce &&
        op.schedule.algorithm != AllReduceAlgorithm::kHierarchical) {
      const DType es = ops::BufferDTypesFor(OpType::kAllReduce, graph.dtype).a;
      op.pieces = RowPieces(spec, setup_.chunk_bytes, static_cast<int64_t>(DTypeSize(es)));
    }
    if (graphs && PieceGraphs::Eligible(engine_, *op.ctx)) {
      op.graphs = std::make_unique<PieceGraphs>(
          engine_, *engine_.Graphs(), op.ctx->rank(0).compute, op.ctx->rank(0).device,
          std::max<int>(1, static_cast<int>(op.pieces.size())),
          absl::StrCat("session ", id(), " op ", spec.id));
    }
  }
  const engine::StreamRole lane =
      deferred_ ? engine::StreamRole::kDeferred : engine::StreamRole::kCompute;
  for (const SessionRank& rank : setup_.ranks) {
    main_.push_back(engine_.GetStream(rank.device, lane));
  }
  posted_.resize(setup_.ranks.size());
  read_.assign(setup_.ranks.size(), 0);
  return absl::OkStatus();
}

SessionRun::~SessionRun() {
  // A run that enqueued something ended through Fail, whose drain events
  // follow all of it. Synchronize would wait for every session's work on the
  // devices, which on CUDA a deferred session can keep busy for as long as it
  // streams, and the lanes' thread (every other session's start and steps)
  // with it. The device-wide wait stays only for a run whose own work does
  // not drain (its streams wait for words nobody writes).
  if (!running_.empty() || !drain_.empty()) {
    const absl::Duration limit = setup_.step_timeout + absl::Seconds(1);
    if (!WaitDrained(limit)) {
      GetLogger("sessions")
          ->warn(
              "session {}: its work did not drain within {}: waiting for its "
              "devices",
              id(), absl::FormatDuration(limit));
      const absl::Status synced = engine_.Synchronize(Devices());
      if (!synced.ok()) {
        GetLogger("sessions")
            ->warn("session {}: its devices at its end: {}", id(), synced.ToString());
      }
    }
  }
  for (Command& cmd : running_) GiveBack(cmd);
  for (size_t r = 0; r < drain_.size(); ++r) devices_.Give(setup_.ranks[r].device, drain_[r]);
  ops_.clear();  // the contexts, before the buffers they read
  Release(engine_, setup_);
}

void SessionRun::Release(engine::Engine& engine, SessionSetup& setup) {
  std::set<engine::BufferId> imported;
  for (SessionRank& rank : setup.ranks) {
    for (const RankTensors& t : rank.tensors) imported.insert({t.x, t.w, t.y});
    imported.insert(rank.signals);
    rank.tensors.clear();
    rank.signals = engine::kNoBuffer;
    if (rank.ring != nullptr) munmap(rank.ring, kSessionRingBytes);
    rank.ring = nullptr;
  }
  imported.erase(engine::kNoBuffer);
  for (engine::BufferId buffer : imported) engine.Free(buffer);
}

std::vector<int> SessionRun::Devices() const {
  std::set<int> devices;
  for (const SessionRank& rank : setup_.ranks) devices.insert(rank.device);
  return {devices.begin(), devices.end()};
}

std::string SessionRun::OpName(int op) const {
  if (op == kSessionRunLayer) return "the layer";
  if (op < 0 || op >= static_cast<int>(ops_.size())) return absl::StrCat("op ", op);
  return ops_[op].spec->id;
}

engine::BufferRef SessionRun::Word(int rank, size_t offset) const {
  return engine::BufferRef{setup_.ranks[rank].signals, offset, sizeof(uint64_t)};
}

std::string SessionRun::NeverCame(int rank, uint64_t seq) const {
  return absl::StrCat("rank ", rank, "'s inputs-ready signal for command ", seq,
                      " never came (step_timeout ", absl::FormatDuration(setup_.step_timeout), ")");
}

absl::Status SessionRun::ReadRing(int r) {
  SessionRing& ring = *setup_.ranks[r].ring;
  const uint64_t posted = ring.posted.load(std::memory_order_acquire);
  while (read_[r] < posted) {
    const uint64_t seq = read_[r] + 1;
    if (seq > completed_ + kSessionRingSlots) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", r, " posted command ", seq, " while command ", completed_ + 1,
                       " was not completed: its ring holds ", kSessionRingSlots, " commands"));
    }
    const SessionCommand& slot = ring.slots[seq % kSessionRingSlots];
    if (slot.seq != seq) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", r, "'s ring slot for command ", seq, " holds command ", slot.seq));
    }
    if (slot.op != kSessionRunLayer &&
        (slot.op < 0 || slot.op >= static_cast<int32_t>(ops_.size()))) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", r, " posted op ", slot.op,
                                                     " as command ", seq, "; the session has ",
                                                     ops_.size(), " ops"));
    }
    posted_[r].push_back(Posted{seq, slot.op, slot.posted_ns});
    ring.slots[seq % kSessionRingSlots].taken_ns = MonotonicNs();
    read_[r] = seq;
    ring.taken.store(seq, std::memory_order_release);
  }
  return absl::OkStatus();
}

absl::Status SessionRun::Take(LaneArbiter& arbiter, double now_ms, bool polling) {
  for (size_t r = 0; r < setup_.ranks.size(); ++r) RETURN_IF_ERROR(ReadRing(static_cast<int>(r)));
  auto all_posted = [&] {
    return std::none_of(posted_.begin(), posted_.end(),
                        [](const std::deque<Posted>& p) { return p.empty(); });
  };
  while (all_posted()) {
    std::vector<Posted> command;
    for (std::deque<Posted>& p : posted_) command.push_back(p.front());
    for (size_t r = 1; r < command.size(); ++r) {
      if (command[r].op != command[0].op) {
        return absl::FailedPreconditionError(
            absl::StrCat("desync: rank 0 posted ", OpName(command[0].op), " as command ",
                         command[0].seq, ", rank ", r, " posted ", OpName(command[r].op)));
      }
    }
    for (std::deque<Posted>& p : posted_) p.pop_front();
    counts_->Update([&](SessionCounts& c) { ++(polling ? c.taken_polling : c.taken_woken); });
    RETURN_IF_ERROR(Start(std::move(command), arbiter, now_ms));
  }
  return absl::OkStatus();
}

absl::Status SessionRun::Start(std::vector<Posted> posted, LaneArbiter& arbiter, double now_ms) {
  Command& cmd = running_.emplace_back();
  cmd.seq = posted[0].seq;
  cmd.op = posted[0].op;
  cmd.ops = cmd.op == kSessionRunLayer ? layer_order_ : std::vector<int>{cmd.op};
  cmd.ready_ns = MonotonicNs();
  for (const Posted& p : posted) cmd.latest_posted_ns = std::max(cmd.latest_posted_ns, p.posted_ns);
  if (!deferred_) {
    RETURN_IF_ERROR(WaitInputs(cmd));
    for (size_t i = 0; i < cmd.ops.size(); ++i) {
      RETURN_IF_ERROR(EnqueuePiece(cmd, cmd.ops[i], 0, false));
    }
    return Finish(cmd);
  }
  DeferredCommand deferred{key_, cmd.seq, {}, now_ms, setup_.deferred_bound_ms};
  for (int i : cmd.ops) {
    const OpRun& op = ops_[i];
    runner::DeferredWork& work = deferred.ops.emplace_back();
    work.id = op.spec->id;
    work.chunks = std::max<int>(1, static_cast<int>(op.pieces.size()));
    work.devices = Devices();
    work.chunk_ms = op.chunk_ms;
  }
  arbiter.Add(std::move(deferred));
  return absl::OkStatus();
}

absl::Status SessionRun::WaitInputs(Command& cmd) {
  const int64_t start_ns = MonotonicNs();
  cmd.queued_ns = start_ns - cmd.ready_ns;
  // From when the streams start to wait: a deferred command's first chunk
  // may go up to its bound after it became runnable.
  cmd.deadline_ns = MonotonicNs() + absl::ToInt64Nanoseconds(setup_.step_timeout);
  cmd.wait_deadline = absl::Now() + setup_.step_timeout;
  for (size_t r = 0; r < setup_.ranks.size(); ++r) {
    const int device = setup_.ranks[r].device;
    RETURN_IF_ERROR(shared_.WaitValue(main_[r], Word(static_cast<int>(r), kSignalInputsReadyOffset),
                                      cmd.seq, cmd.wait_deadline));
    ASSIGN_OR_RETURN(cmd.seen.emplace_back(), devices_.Take(device));
    RETURN_IF_ERROR(engine_.RecordEvent(cmd.seen.back(), main_[r]));
  }
  cmd.waited = true;
  cmd.inputs_wait_ns += MonotonicNs() - start_ns;
  return absl::OkStatus();
}

absl::Status SessionRun::WiredInput(OpRun& op) {
  const OpRun& from = ops_[op.producer];
  const DType dtype = setup_.graph.dtype;
  const DType src_dtype = ops::BufferDTypesFor(from.spec->type, dtype).y;
  const DType dst_dtype = ops::BufferDTypesFor(op.spec->type, dtype).a;
  const LocalShapes& out = from.ctx->shapes();
  const LocalShapes& in = op.ctx->shapes();
  const int op_index = static_cast<int>(&op - ops_.data());
  ops::OpContext& ctx = *op.ctx;
  for (int j = 0; j < ctx.tp(); ++j) {
    const SessionRank& rank = setup_.ranks[op.session_rank[j]];
    engine::ElementwiseArgs args;
    args.src = {rank.tensors[op.producer].y, 0,
                static_cast<size_t>(out.y_rows * out.y_cols) * DTypeSize(src_dtype)};
    args.src_dtype = src_dtype;
    args.dst = {rank.tensors[op_index].x, 0,
                static_cast<size_t>(in.a_rows * in.a_cols) * DTypeSize(dst_dtype)};
    args.dst_dtype = dst_dtype;
    args.rows = out.y_rows;
    args.src_cols = out.y_cols;
    args.activation = op.spec->activation;
    args.dst_scale = dst_dtype == DType::kFP8 ? kChainFp8Dequant : 1.0f;
    RETURN_IF_ERROR(engine_.Elementwise(ctx.rank(j).compute, args));
    if (ctx.tp() > 1)
      RETURN_IF_ERROR(ctx.Record(j, ctx.rank(j).compute, ops::EventKind::kInputReady));
  }
  // A schedule may read a peer's input from its own streams (p2p gathers); a
  // rank alone reads it on the stream that made it.
  for (int j = 0; j < ctx.tp() && ctx.tp() > 1; ++j) {
    RETURN_IF_ERROR(ctx.WaitAll(ctx.rank(j).compute, ops::EventKind::kInputReady));
  }
  return absl::OkStatus();
}

absl::Status SessionRun::EnqueuePiece(Command& cmd, int op_index, int chunk, bool forced) {
  OpRun& op = ops_[op_index];
  ops::OpContext& ctx = *op.ctx;
  const int64_t start_ns = MonotonicNs();
  // The span starts before the wired input: an op's time includes the pass
  // that makes its input, which a replay runs inside the op's graph.
  std::vector<engine::EventId> starts;
  for (int j = 0; j < ctx.tp(); ++j) {
    ASSIGN_OR_RETURN(starts.emplace_back(), devices_.Take(ctx.rank(j).device));
    RETURN_IF_ERROR(engine_.RecordEvent(starts.back(), ctx.rank(j).compute));
  }
  int64_t wired_ns = 0;  // the wired input's enqueue, where it ran directly
  auto enqueue = [&]() -> absl::Status {
    if (chunk == 0 && op.producer >= 0) {
      const int64_t wired_start = MonotonicNs();
      RETURN_IF_ERROR(WiredInput(op));
      wired_ns = MonotonicNs() - wired_start;
    }
    if (op.pieces.empty()) return ops::EnqueueOp(ctx, op.schedule);
    return ops::EnqueueAllReduceRows(ctx, op.schedule, op.pieces[chunk]);
  };
  bool replayed = false;
  if (op.graphs != nullptr) {
    ASSIGN_OR_RETURN(replayed, op.graphs->Run(chunk, enqueue));
  } else {
    RETURN_IF_ERROR(enqueue());
  }
  ++(replayed ? cmd.pieces_replayed : cmd.pieces_direct);
  // What the client waited for is on the device now; the events and the
  // outputs-ready write after it are the daemon's bookkeeping.
  cmd.op_enqueued_ns = MonotonicNs();
  cmd.wired_ns += wired_ns;
  cmd.launch_ns += cmd.op_enqueued_ns - start_ns - wired_ns;
  const int chunks = std::max<int>(1, static_cast<int>(op.pieces.size()));
  for (int j = 0; j < ctx.tp(); ++j) {
    LaneSpan span;
    span.interval =
        LaneInterval{id(), op.spec->id, ctx.rank(j).device, deferred_, chunk, 0, 0, forced};
    span.interval.seq = cmd.seq;
    span.session = key_;
    span.seq = cmd.seq;
    span.op_index = op_index;
    span.timed = op.session_rank[j] == 0;
    span.last_chunk = chunk + 1 == chunks;
    span.critical_collective = !deferred_ && op.collective;
    span.start = starts[j];
    ASSIGN_OR_RETURN(span.end, devices_.Take(ctx.rank(j).device));
    RETURN_IF_ERROR(engine_.RecordEvent(span.end, ctx.rank(j).compute));
    devices_.Track(std::move(span));
  }
  return absl::OkStatus();
}

absl::Status SessionRun::Issue(const LaneGrant& grant) {
  auto it = std::find_if(running_.begin(), running_.end(),
                         [&](const Command& c) { return c.seq == grant.seq; });
  if (it == running_.end() || it->enqueued) {
    return absl::InternalError(absl::StrCat("session ", id(), ": a chunk granted for command ",
                                            grant.seq, ", which is not waiting for the lane"));
  }
  Command& cmd = *it;
  // The arbiter decides when a command became runnable (LaneArbiter::Add).
  if (cmd.runnable_ns == 0) {
    cmd.runnable_ns = MonotonicNs() - static_cast<int64_t>(grant.runnable_age_ms * 1e6);
  }
  if (!cmd.waited) RETURN_IF_ERROR(WaitInputs(cmd));
  const int op_index = cmd.ops[grant.op];
  RETURN_IF_ERROR(EnqueuePiece(cmd, op_index, grant.chunk, grant.forced));
  counts_->Update([&](SessionCounts& c) {
    OpCounts& op = c.ops[op_index];
    ++op.chunks;
    op.chunks_forced += grant.forced ? 1 : 0;
    op.chunks_at_bound += grant.at_bound ? 1 : 0;
    op.lane_wait_ms += grant.waited_ms;
  });
  if (!grant.last) return absl::OkStatus();
  return Finish(cmd);
}

absl::Status SessionRun::Finish(Command& cmd) {
  for (size_t r = 0; r < setup_.ranks.size(); ++r) {
    RETURN_IF_ERROR(shared_.WriteValue(
        main_[r], Word(static_cast<int>(r), kSignalOutputsReadyOffset), cmd.seq));
    ASSIGN_OR_RETURN(cmd.done.emplace_back(), devices_.Take(setup_.ranks[r].device));
    RETURN_IF_ERROR(engine_.RecordEvent(cmd.done.back(), main_[r]));
    RETURN_IF_ERROR(WakeWhenDone(static_cast<int>(r), cmd.seq));
  }
  cmd.enqueued = true;
  const int64_t enqueued_ns = cmd.op_enqueued_ns > 0 ? cmd.op_enqueued_ns : MonotonicNs();
  for (SessionRank& rank : setup_.ranks) {
    rank.ring->slots[cmd.seq % kSessionRingSlots].enqueued_ns = enqueued_ns;
    rank.ring->enqueued.store(cmd.seq, std::memory_order_release);
  }
  counts_->Update([&](SessionCounts& c) {
    AddSample(c.enqueue_us, static_cast<double>(enqueued_ns - cmd.latest_posted_ns) / 1e3);
    AddSample(c.take_us, static_cast<double>(cmd.ready_ns - cmd.latest_posted_ns) / 1e3);
    AddSample(c.queued_us, static_cast<double>(cmd.queued_ns) / 1e3);
    AddSample(c.inputs_wait_us, static_cast<double>(cmd.inputs_wait_ns) / 1e3);
    AddSample(c.wired_us, static_cast<double>(cmd.wired_ns) / 1e3);
    AddSample(c.launch_us, static_cast<double>(cmd.launch_ns) / 1e3);
    c.pieces_replayed += cmd.pieces_replayed;
    c.pieces_direct += cmd.pieces_direct;
  });
  return absl::OkStatus();
}

absl::Status SessionRun::WakeWhenDone(int rank, uint64_t seq) {
  // Where the engine runs host work in a stream's order, the stream itself
  // rings the rank's posted doorbell, which the lanes watch: they see the
  // command done at once rather than at their next poll of its events. A
  // doorbell with nothing new on the ring only makes them look. A later
  // command on the ring already has its own wake queued behind this one
  // (Finish queues it before it publishes `enqueued`): one wake does for both.
  engine::HostWorkQueue* host_work = engine_.HostWork();
  if (host_work == nullptr) return absl::OkStatus();
  // The fd and the ring outlive the work: the run synchronizes its devices
  // before it closes and unmaps them.
  const int fd = setup_.ranks[rank].posted_doorbell.get();
  const SessionRing* ring = setup_.ranks[rank].ring;
  return host_work->EnqueueHostWork(main_[rank], {}, [fd, ring, seq](const std::vector<uint8_t*>&) {
    if (ring->enqueued.load(std::memory_order_acquire) > seq) return absl::OkStatus();
    const uint64_t one = 1;
    (void)!write(fd, &one, sizeof(one));
    return absl::OkStatus();
  });
}

absl::Status SessionRun::Poll() {
  while (!running_.empty()) {
    Command& cmd = running_.front();
    if (!cmd.enqueued) return CheckOverdue(cmd);
    bool done = true;
    for (engine::EventId event : cmd.done) {
      ASSIGN_OR_RETURN(const bool finished, engine_.EventDone(event));
      done = done && finished;
    }
    if (!done) return CheckOverdue(cmd);
    // A backend that fails a wait past its deadline (the host's) runs the
    // rest of the stream after it: only the device's error tells.
    if (MonotonicNs() >= cmd.deadline_ns) {
      const absl::Status synced = engine_.Synchronize(Devices());
      if (!synced.ok()) return Explain(synced, cmd);
    }
    Complete(cmd);
    GiveBack(cmd);
    running_.pop_front();
  }
  return absl::OkStatus();
}

absl::Status SessionRun::CheckOverdue(const Command& cmd) {
  if (!cmd.waited || MonotonicNs() < cmd.deadline_ns + kOverdueGraceNs) return absl::OkStatus();
  for (size_t r = 0; r < cmd.seen.size(); ++r) {
    ASSIGN_OR_RETURN(const bool seen, engine_.EventDone(cmd.seen[r]));
    if (!seen) return absl::DeadlineExceededError(NeverCame(static_cast<int>(r), cmd.seq));
  }
  return absl::OkStatus();
}

absl::Status SessionRun::Explain(const absl::Status& status, const Command& cmd) {
  if (status.code() != absl::StatusCode::kDeadlineExceeded) {
    return absl::Status(status.code(), absl::StrCat("command ", cmd.seq, ": ", status.message()));
  }
  // The devices are idle: the words read back at once.
  for (size_t r = 0; r < setup_.ranks.size(); ++r) {
    uint64_t inputs_ready = 0;
    const absl::Status read = engine_.CopyToHost(
        &inputs_ready, Word(static_cast<int>(r), kSignalInputsReadyOffset), setup_.ranks[r].device);
    if (read.ok() && inputs_ready < cmd.seq) {
      return absl::DeadlineExceededError(NeverCame(static_cast<int>(r), cmd.seq));
    }
  }
  return absl::DeadlineExceededError(absl::StrCat("command ", cmd.seq, ": ", status.message()));
}

void SessionRun::Complete(Command& cmd) {
  const int64_t now = MonotonicNs();
  // Counted before the rings say so, so that a client that saw its command
  // completed finds it in the figures.
  counts_->Update([&](SessionCounts& c) {
    ++c.steps;
    for (int i : cmd.ops) {
      OpCounts& op = c.ops[i];
      ++op.steps;
      if (!deferred_) continue;
      const double delay_ms = Ms(now - (cmd.runnable_ns > 0 ? cmd.runnable_ns : cmd.ready_ns));
      op.max_delay_ms = std::max(op.max_delay_ms, delay_ms);
      op.over_bound += delay_ms > setup_.deferred_bound_ms ? 1 : 0;
    }
  });
  completed_ = cmd.seq;
  for (size_t r = 0; r < setup_.ranks.size(); ++r) {
    SessionRing& ring = *setup_.ranks[r].ring;
    SessionCommand& slot = ring.slots[cmd.seq % kSessionRingSlots];
    slot.done_ns = now;
    slot.status = 0;
    ring.completed.store(cmd.seq, std::memory_order_release);
    RingDoorbell(static_cast<int>(r));
  }
}

void SessionRun::GiveBack(Command& cmd) {
  for (size_t r = 0; r < cmd.seen.size(); ++r) devices_.Give(setup_.ranks[r].device, cmd.seen[r]);
  for (size_t r = 0; r < cmd.done.size(); ++r) devices_.Give(setup_.ranks[r].device, cmd.done[r]);
  cmd.seen.clear();
  cmd.done.clear();
}

void SessionRun::RingDoorbell(int rank) {
  const uint64_t one = 1;
  const int fd = setup_.ranks[rank].completed_doorbell.get();
  if (fd >= 0 && write(fd, &one, sizeof(one)) != sizeof(one)) {
    GetLogger("sessions")
        ->debug("session {}: rank {}'s doorbell: {}", id(), rank, std::strerror(errno));
  }
}

void SessionRun::Finished(const LaneSpan& span) {
  if (!span.timed || !span.read) return;
  OpRun& op = ops_[span.op_index];
  const double ms = span.interval.end_ms - span.interval.start_ms;
  if (deferred_) {
    op.chunk_ms = ms;
    op.busy_ms += ms;
    if (!span.last_chunk) return;
  }
  const double sample = deferred_ ? op.busy_ms : ms;
  op.busy_ms = 0;
  counts_->Update([&](SessionCounts& c) { AddDeviceTime(c.ops[span.op_index], sample); });
}

void SessionRun::Fail(const absl::Status& status) {
  if (failed_) return;
  failed_ = true;
  failure_ = status;
  const std::string message(status.message());
  const int32_t code = static_cast<int32_t>(status.code());
  for (size_t r = 0; r < setup_.ranks.size(); ++r) {
    SessionRing& ring = *setup_.ranks[r].ring;
    const size_t length = std::min(message.size(), sizeof(ring.failed_message) - 1);
    std::memcpy(ring.failed_message, message.data(), length);
    ring.failed_message[length] = '\0';
    for (uint64_t seq = completed_ + 1; seq <= read_[r]; ++seq) {
      ring.slots[seq % kSessionRingSlots].status = code;
    }
    ring.failed_code.store(code, std::memory_order_release);
    RingDoorbell(static_cast<int>(r));
  }
  counts_->Update([&](SessionCounts& c) {
    c.failed = true;
    c.error = message;
  });
  ReleaseWaits();
  // What the session enqueued is done once each rank's lane reaches this.
  for (size_t r = 0; r < setup_.ranks.size(); ++r) {
    absl::StatusOr<engine::EventId> event = devices_.Take(setup_.ranks[r].device);
    if (!event.ok()) {
      drain_.push_back(engine::kNoEvent);
    } else if (engine_.RecordEvent(*event, main_[r]).ok()) {
      drain_.push_back(*event);
    } else {
      devices_.Give(setup_.ranks[r].device, *event);
      drain_.push_back(engine::kNoEvent);
    }
  }
}

void SessionRun::ReleaseWaits() {
  std::vector<bool> waiting(setup_.ranks.size(), false);
  for (const Command& cmd : running_) {
    for (size_t r = 0; r < cmd.seen.size(); ++r) {
      absl::StatusOr<bool> seen = engine_.EventDone(cmd.seen[r]);
      if (seen.ok() && !*seen) waiting[r] = true;
    }
  }
  const engine::StreamRole other =
      deferred_ ? engine::StreamRole::kCompute : engine::StreamRole::kDeferred;
  for (size_t r = 0; r < waiting.size(); ++r) {
    if (!waiting[r]) continue;
    const int device = setup_.ranks[r].device;
    const absl::Status written =
        shared_.WriteValue(engine_.GetStream(device, other),
                           Word(static_cast<int>(r), kSignalInputsReadyOffset), UINT64_MAX);
    if (!written.ok()) {
      GetLogger("sessions")
          ->warn("session {}: releasing rank {}'s inputs wait: {}", id(), r, written.ToString());
    }
  }
}

bool SessionRun::WaitDrained(absl::Duration limit) {
  if (drain_.empty() && !running_.empty()) Fail(absl::CancelledError("the session ended"));
  const absl::Time give_up = absl::Now() + limit;
  while (!Drained()) {
    if (absl::Now() >= give_up) return false;
    absl::SleepFor(absl::Microseconds(100));
  }
  return true;
}

uint64_t SessionRun::Outstanding() const {
  for (size_t r = 0; r < setup_.ranks.size(); ++r) {
    const SessionRing* ring = setup_.ranks[r].ring;
    if (ring != nullptr && ring->posted.load(std::memory_order_acquire) > completed_) {
      return completed_ + 1;
    }
  }
  return running_.empty() ? 0 : running_.front().seq;
}

bool SessionRun::HasPosted() const {
  for (size_t r = 0; r < setup_.ranks.size(); ++r) {
    const SessionRing* ring = setup_.ranks[r].ring;
    if (ring != nullptr && ring->posted.load(std::memory_order_acquire) > read_[r]) return true;
  }
  return false;
}

bool SessionRun::Drained() {
  for (engine::EventId event : drain_) {
    if (event == engine::kNoEvent) continue;
    absl::StatusOr<bool> done = engine_.EventDone(event);
    if (done.ok() && !*done) return false;
  }
  return true;
}

}  // namespace overlap::sessions
