#include "server/runner/layer_step.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/deferred_collectives.h"
#include "common/graph_validator.h"
#include "common/status_macros.h"
#include "server/ops/chain_reference.h"
#include "server/ops/op_context.h"
#include "server/ops/reference.h"
#include "server/runner/dynamic_step.h"
#include "server/runner/layer_members.h"
#include "server/runner/op_phases.h"
#include "server/runner/op_run.h"
#include "server/runner/traced_iteration.h"
#include "server/runner/tuning_cache.h"

namespace overlap::runner {

using ops::BufferDTypesFor;
using ops::BuffersFor;
using ops::EnqueueOp;
using ops::FillInputs;
using ops::OpContext;
using ops::OutputTolerance;
using ops::PoisonOutputs;
using ops::Schedule;
using ops::Verification;
using ops::VerifyOutputs;
namespace {

// Bucket inputs get seeds apart from every op's (an op's are its spec index).
constexpr int kBucketSeedBase = 1 << 20;
// A bucket's rows: long enough for whole cache lines, padded to whole rows per rank.
constexpr int64_t kBucketRowElements = 1024;

// Merges runs of deferred all-reduces over one transport, algorithm and group,
// each at most `cap_bytes`, into buckets of at most `cap_bytes`: one
// all-reduce of their elements (padded to whole rows), sent where the last of
// them stands, before the ops that follow it, as DDP fires a bucket once its
// last gradient is ready. A bucket of
// one stays that op. An op that waits on a member of the bucket being filled
// closes it first: merged, or fired after the op, that member would no longer
// come before it.
std::vector<Member> Bucket(std::vector<Member> members, int64_t cap_bytes, const JobSpec& spec,
                           int device_count) {
  // What an all_reduce sums (BufferDTypesFor: bf16 in an fp8 graph).
  const int64_t es =
      static_cast<int64_t>(DTypeSize(BufferDTypesFor(OpType::kAllReduce, spec.dtype).a));
  // With chunking on, an all-reduce larger than a chunk is chunked instead.
  const int64_t max_bytes =
      spec.chunk_kib > 0 ? std::min(cap_bytes, int64_t{spec.chunk_kib} << 10) : cap_bytes;
  auto bucketable = [&](const Member& m) {
    return m.deferred && m.join_before.empty() && m.op.type == OpType::kAllReduce &&
           !InChain(spec, m.op) &&
           m.op.algorithm != AllReduceAlgorithm::kHierarchical &&
           m.op.m * m.op.n * es <= max_bytes;
  };
  std::vector<Member> out;
  std::vector<Member> open;  // the bucket being filled
  int64_t open_bytes = 0;
  size_t fire_at = 0;  // where in `out` its last member stands: the bucket goes there
  int buckets = 0;
  auto close = [&] {
    const auto at = out.begin() + static_cast<std::ptrdiff_t>(fire_at);
    if (open.size() == 1) out.insert(at, std::move(open[0]));
    if (open.size() > 1) {
      Member b;
      b.spec_index = kBucketSeedBase + buckets++;
      b.schedule = open[0].schedule;
      b.deferred = true;
      int64_t elements = 0;
      for (const Member& m : open) {
        elements += m.op.m * m.op.n;
        b.bucketed.push_back(m.op.id);
      }
      b.op.id = absl::StrCat("bucket(", absl::StrJoin(b.bucketed, "+"), ")");
      b.op.type = OpType::kAllReduce;
      b.op.group = open[0].op.group;
      b.op.n = kBucketRowElements;
      const int64_t rows = (elements + kBucketRowElements - 1) / kBucketRowElements;
      const int tp = GroupSize(spec.mesh, b.op.group, device_count);
      b.op.m = (rows + tp - 1) / tp * tp;
      for (const Member& m : open) {
        b.alone_ms += m.alone_ms;
        b.op.after.insert(b.op.after.end(), m.op.after.begin(), m.op.after.end());
      }
      b.beside_gemms = open[0].beside_gemms;  // one transport: the same factor
      b.op.mode = OverlapMode::kSerial;
      b.op.transport = b.schedule.transport;
      b.op.algorithm = b.schedule.algorithm;
      out.insert(at, std::move(b));
    }
    open.clear();
    open_bytes = 0;
  };
  auto waits_on_open = [&](const Member& m) {
    for (const Member& o : open) {
      if (std::find(m.op.after.begin(), m.op.after.end(), o.op.id) != m.op.after.end()) {
        return true;
      }
    }
    return false;
  };
  for (Member& m : members) {
    if (waits_on_open(m)) close();
    if (!bucketable(m)) {
      out.push_back(std::move(m));
      continue;
    }
    const int64_t bytes = m.op.m * m.op.n * es;
    if (!open.empty() &&
        (open_bytes + bytes > cap_bytes || open[0].schedule.transport != m.schedule.transport ||
         open[0].schedule.algorithm != m.schedule.algorithm || open[0].op.group != m.op.group)) {
      close();
    }
    open_bytes += bytes;
    open.push_back(std::move(m));
    fire_at = out.size();
  }
  close();
  return out;
}

// The schedule the op ran alone, which it runs in the step too.
Schedule ScheduleOf(const OpMeasurement& m) {
  Schedule schedule = m.choice.schedule;
  schedule.chunks = std::max(1, schedule.chunks);
  return schedule;
}


// One layer iteration: each op on its streams in order; a deferred op starts
// on its side streams once the main streams reach it (a chunked one piece by
// piece, one after each op that follows), and the main streams wait for it
// before the op it joins before, or at the end. Without `with_deferred` the
// deferred ops are left out: the step they would add to, to tell how much of
// them hid. `tracer`, when set, labels the spans of each op with its id.
absl::Status EnqueueLayer(std::vector<Member>& members, OpContext& main,
                          TimelineEngine* tracer = nullptr, bool with_deferred = true) {
  const MainStreams streams = MainStreamsOf(main);
  for (Member& m : members) m.sent = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    Member& m = members[i];
    if (m.deferred && !with_deferred) continue;
    if (tracer != nullptr) tracer->SetLabel(m.op.id);
    if (with_deferred) RETURN_IF_ERROR(JoinBefore(members, m.op.id, streams));
    if (m.deferred) {
      RETURN_IF_ERROR(SendDeferred(m, streams));
      continue;
    }
    RETURN_IF_ERROR(EnqueueWiredInput(m));
    RETURN_IF_ERROR(EnqueueOp(*m.ctx, m.schedule));
    if (!with_deferred) continue;
    // After each op on the main streams, every chunked op sent before it sends its next piece.
    for (size_t j = 0; j < i; ++j) {
      Member& earlier = members[j];
      if (!earlier.deferred || earlier.pieces.empty() || !Unsent(earlier)) continue;
      if (tracer != nullptr) tracer->SetLabel(earlier.op.id);
      RETURN_IF_ERROR(SendDeferred(earlier, streams));
    }
  }
  if (!with_deferred) return absl::OkStatus();
  return JoinBefore(members, "", streams);
}

// A deferred op that nothing waits on joins the main streams before the first
// op that starts defer_bound_ms or more after it was sent, by the ops' times
// alone (the main streams' ops back to back), or at the end of the step.
void Bound(std::vector<Member>& members, double bound_ms) {
  for (size_t i = 0; i < members.size(); ++i) {
    Member& m = members[i];
    if (!m.deferred || !m.join_before.empty()) continue;
    double elapsed = 0;
    for (size_t j = i + 1; j < members.size(); ++j) {
      if (members[j].deferred) continue;
      if (elapsed >= bound_ms) {
        m.join_before = members[j].op.id;
        break;
      }
      elapsed += members[j].alone_ms;
    }
  }
}

// Whether the collective alone at members[i] goes to the side streams, and
// before which op it joins back; the members after it are placed already.
// It joins before the first op on the main streams that waits on it (ops on
// the side streams run after it on them anyway), or at the end of the step.
// It goes to the side when a GEMM op can run beside it before that join, or
// when nothing on the main streams waits on it (a gradient all-reduce, which
// may then share a bucket).
void PlaceOnSideStreams(std::vector<Member>& members, size_t i, bool deferred_collective) {
  // Deferred (DeferredCollectives): beside the ops after it, to the step's end.
  if (deferred_collective) {
    members[i].deferred = true;
    return;
  }
  const std::string& id = members[i].op.id;
  size_t first_waiter = members.size();
  for (size_t j = i + 1; j < members.size() && first_waiter == members.size(); ++j) {
    const std::vector<std::string>& after = members[j].op.after;
    const bool waits = std::find(after.begin(), after.end(), id) != after.end();
    if (waits && !members[j].deferred) first_waiter = j;
  }
  // Only collectives on the side streams wait on it: it stays on the main streams.
  if (first_waiter == members.size()) return;
  bool gemm_beside = false;
  for (size_t j = i + 1; j < first_waiter; ++j) {
    gemm_beside = gemm_beside || !IsCollectiveOnly(members[j].op.type);
  }
  members[i].deferred = gemm_beside;
  members[i].join_before = gemm_beside ? members[first_waiter].op.id : "";
}

// scheduler: dynamic: the iterations the dispatch figures come from, at most.
constexpr int kDispatchIterations = 5;
// Iterations that time the activation passes alone: short elementwise work,
// whose median settles in a few.
constexpr int kActivationIterations = 10;

// The layer step's clock as LayerOrder builds the order, from each op's time
// alone: the GEMM ops run back to back on the main streams, the collectives
// alone one after another on the side stream, each no earlier than the main
// streams reach the point it was sent at.
class StepClock {
 public:
  // `ms`: each op's time alone, by spec index; empty when not known.
  StepClock(const JobSpec& spec, std::vector<double> ms, std::vector<double> beside_gemms)
      : spec_(spec), ms_(std::move(ms)), beside_gemms_(std::move(beside_gemms)) {
    std::map<std::string, int> index_of;
    for (size_t i = 0; i < spec.ops.size(); ++i) index_of[spec.ops[i].id] = static_cast<int>(i);
    std::set<std::string> waited_on;
    for (const OpSpec& op : spec.ops) waited_on.insert(op.after.begin(), op.after.end());
    done_.assign(spec.ops.size(), false);
    for (size_t c = 0; c < spec.ops.size(); ++c) {
      if (!IsCollectiveOnly(spec.ops[c].type) || waited_on.count(spec.ops[c].id) == 0) continue;
      // The GEMM ops it waits on, directly or not: the main streams' work before it can go.
      std::set<int> seen;
      std::vector<int> stack = {static_cast<int>(c)};
      while (!stack.empty()) {
        const int op = stack.back();
        stack.pop_back();
        for (const std::string& dep : spec.ops[op].after) {
          const auto it = index_of.find(dep);
          if (it != index_of.end() && seen.insert(it->second).second) stack.push_back(it->second);
        }
      }
      std::vector<int>& gemms = gemm_ancestors_[static_cast<int>(c)];
      for (int op : seen) {
        if (!IsCollectiveOnly(spec.ops[op].type)) gemms.push_back(op);
      }
    }
  }

  bool IsCritical(int op) const { return gemm_ancestors_.count(op) > 0; }

  void Picked(int op) {
    done_[op] = true;
    if (ms_.empty()) return;
    if (IsCollectiveOnly(spec_.ops[op].type)) {
      side_free_ = std::max(side_free_, main_) + BesideGemms(op) * ms_[op];
    } else {
      main_ += ms_[op];
    }
  }

  // Whether collective `op`, sent now, would be off the side stream before
  // every critical collective still to send could go (at the earliest, once
  // the GEMM ops it waits on ran): it then queues ahead of none. Without
  // times, only when no critical collective is left to send.
  bool FitsBeforeTheCriticalOnes(int op) const {
    const double end = std::max(side_free_, main_) + BesideGemms(op) * (ms_.empty() ? 0 : ms_[op]);
    for (const auto& [c, gemms] : gemm_ancestors_) {
      if (done_[c]) continue;
      if (ms_.empty()) return false;
      double ready = main_;
      for (int gemm : gemms) ready += done_[gemm] ? 0 : ms_[gemm];
      if (end > ready) return false;
    }
    return true;
  }

 private:
  // Collective `op`'s time beside the GEMM ops over its time alone.
  double BesideGemms(int op) const {
    return beside_gemms_.size() == spec_.ops.size() && beside_gemms_[op] > 0 ? beside_gemms_[op]
                                                                             : kBesideGemmsFactor;
  }

  const JobSpec& spec_;
  const std::vector<double> ms_;
  const std::vector<double> beside_gemms_;
  // Each critical collective (a collective alone that an op waits on) and the
  // GEMM ops it waits on, directly or not.
  std::map<int, std::vector<int>> gemm_ancestors_;
  std::vector<bool> done_;
  double main_ = 0;       // when the main streams finish the ops picked so far
  double side_free_ = 0;  // when the side stream does
};

// What was deferred and how, and how much of it hid: the step once more
// without the deferred ops, beside the step with them.
absl::Status ReportDeferrals(OpRun& run, std::vector<Member>& members, OpContext& main,
                             bool replay, const JobSpec& spec, LayerStepReport* result) {
  const int64_t es =
      static_cast<int64_t>(DTypeSize(BufferDTypesFor(OpType::kAllReduce, spec.dtype).a));
  double deferred_alone = 0;
  for (const Member& m : members) {
    if (!m.deferred) continue;
    LayerDeferral& d = result->deferrals.emplace_back();
    d.op = m.op.id;
    d.how = !m.pieces.empty()    ? "chunked"
            : !m.bucketed.empty() ? "bucketed"
                                  : "whole";
    d.pieces = Pieces(m);
    d.piece_bytes = m.pieces.empty() ? 0 : m.pieces[0].rows * m.op.n * es;
    d.joined_before = m.join_before;
    d.alone_ms = m.alone_ms;
    d.dispatched = m.on_deferred_lane;
    deferred_alone += m.alone_ms;
  }
  if (result->deferrals.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const TimedRun without,
                   run.Timed(
                       "step without deferred", 1, spec.iterations,
                       [&] { return EnqueueLayer(members, main, nullptr, /*with_deferred=*/false); },
                       ops::EventKind::kIterEnd, replay));
  const Summary alone = Summarize(without.times);
  result->without_deferred = alone;
  const double added = std::max(0.0, result->step.median - alone.median);
  result->deferred_hidden_fraction =
      deferred_alone > 0 ? std::clamp(1.0 - added / deferred_alone, 0.0, 1.0) : 0.0;
  return absl::OkStatus();
}

// Each member's output on each local rank to `hooks.on_layer_output`, where
// one is set (tests comparing two runs).
absl::Status HandOutOutputs(std::vector<Member>& members, const RunHooks& hooks) {
  if (!hooks.on_layer_output) return absl::OkStatus();
  for (Member& m : members) {
    OpContext& ctx = *m.ctx;
    const LocalShapes& shapes = ctx.shapes();
    for (int r = 0; r < ctx.tp(); ++r) {
      const ops::RankState& rank = ctx.rank(r);
      if (!ctx.engine().IsLocalDevice(rank.device)) continue;
      std::vector<uint8_t> y(static_cast<size_t>(shapes.y_rows * shapes.y_cols) *
                             DTypeSize(ctx.DTypeOf(rank.y)));
      RETURN_IF_ERROR(ctx.engine().CopyToHost(
          y.data(), ctx.Rows(rank.y, 0, shapes.y_rows, shapes.y_cols), rank.device));
      hooks.on_layer_output(ctx.op().id, r, std::move(y));
    }
  }
  return absl::OkStatus();
}

// Whether any op of the step moves data between devices: one with a
// collective over a group of two or more. At tp 1 none does, and no part of
// the step is communication.
bool Communicates(const std::vector<Member>& members, const JobSpec& spec, int device_count) {
  return std::any_of(members.begin(), members.end(), [&](const Member& m) {
    return !IsGemmOnly(m.op.type) && GroupSize(spec.mesh, m.op.group, device_count) > 1;
  });
}

// The step's activation passes alone (each wired input made from its
// producer's output on the main streams, as the step makes it), timed as the
// step is; 0 when no op on the main streams reads another's output. They are
// neither GEMM nor communication: the exposed communication leaves them out.
absl::StatusOr<double> TimeActivationPasses(OpRun& run, std::vector<Member>& members,
                                            int iterations) {
  std::vector<Member*> wired;
  for (Member& m : members) {
    if (!m.deferred && m.input_from != nullptr) wired.push_back(&m);
  }
  if (wired.empty()) return 0.0;
  ASSIGN_OR_RETURN(const TimedRun passes,
                   run.Timed("activations", 1, iterations, [&]() -> absl::Status {
                     for (Member* m : wired) RETURN_IF_ERROR(EnqueueWiredInput(*m));
                     return absl::OkStatus();
                   }));
  return Summarize(passes.times).median;
}

// The step's time that only communication explains: the step less the ops'
// GEMMs alone and the activation passes, floored at 0; 0 when nothing
// communicates.
double ExposedComm(const LayerStepReport& layer, double gemms_ms, bool communicates) {
  if (!communicates) return 0;
  return std::max(0.0, layer.step.median - gemms_ms - layer.activation_ms);
}

}  // namespace

std::vector<double> BesideGemmsFactors(const engine::Engine& engine, const JobSpec& spec,
                                       const std::vector<int>& devices,
                                       const std::vector<Transport>& transports,
                                       TuningCache* tuning_cache) {
  std::vector<double> factors(spec.ops.size(), kBesideGemmsFactor);
  if (tuning_cache == nullptr || devices.empty()) return factors;
  const int device_count = static_cast<int>(devices.size());
  // Each group size's calibration, looked up once.
  std::map<int, absl::StatusOr<planner::Calibration>> by_ranks;
  for (size_t i = 0; i < spec.ops.size() && i < transports.size(); ++i) {
    if (!IsCollectiveOnly(spec.ops[i].type)) continue;
    const int ranks = GroupSize(spec.mesh, spec.ops[i].group, device_count);
    auto it = by_ranks.find(ranks);
    if (it == by_ranks.end()) {
      it = by_ranks.emplace(ranks, MatchingCalibration(*tuning_cache, engine, devices[0], ranks))
               .first;
    }
    if (!it->second.ok()) continue;
    const auto slowdown = it->second->gemm_slowdown.find(transports[i]);
    if (slowdown != it->second->gemm_slowdown.end() && slowdown->second > 0) {
      factors[i] = slowdown->second;
    }
  }
  return factors;
}

std::string ChainName(const JobSpec& spec, int index) {
  std::string name = spec.ops[index].id;
  for (const OpSpec* op = &spec.ops[index]; !op->input.empty();) {
    const std::string arrow = op->activation == Activation::kNone
                                  ? " -> "
                                  : absl::StrCat(" -", ActivationName(op->activation), "-> ");
    name = absl::StrCat(op->input, arrow, name);
    const OpSpec* from = nullptr;
    for (const OpSpec& other : spec.ops) {
      if (other.id == op->input) from = &other;
    }
    if (from == nullptr) break;
    op = from;
  }
  return name;
}

absl::StatusOr<std::vector<int>> LayerOrder(const JobSpec& spec, const std::vector<double>& ms,
                                            const std::vector<double>& beside_gemms) {
  StepClock clock(spec, ms.size() == spec.ops.size() ? ms : std::vector<double>{}, beside_gemms);
  // 0 goes first: critical collectives; then the others that fit before the
  // critical ones left; GEMM ops; and last the others that do not fit.
  return TopologicalOrder(
      spec,
      [&](int i, const std::vector<bool>&) {
        if (clock.IsCritical(i)) return 0;
        if (!IsCollectiveOnly(spec.ops[i].type)) return 2;
        return clock.FitsBeforeTheCriticalOnes(i) ? 1 : 3;
      },
      [&](int picked) { clock.Picked(picked); });
}

namespace {

// An fp8 op that reads another's output reads it with the chain's scale.
absl::Status UseChainScale(OpContext& ctx) {
  if (ctx.op().input.empty()) return absl::OkStatus();
  for (int r = 0; r < ctx.tp(); ++r) {
    if (ctx.rank(r).scales == engine::kNoBuffer) continue;
    RETURN_IF_ERROR(ctx.engine().FillConstant(ctx.rank(r).compute, ctx.ScaleOf(r, 0), DType::kF32,
                                              kChainFp8Dequant));
  }
  return absl::OkStatus();
}

// In a job that spans daemons every node plans the same step or their
// collectives pair up wrongly: the plan (the layer order, where deferred
// all-reduces are joined) follows the ops' times alone, which each node
// measured on its own ranks. So they agree on one set first: every rank's,
// summed by an all-reduce over every device and averaged, the same bits on
// every node. A job on one daemon keeps its own.
absl::Status AgreeAcrossDaemons(engine::Engine& engine, const std::vector<int>& devices,
                                std::vector<double>* times) {
  if (!SpansDaemons(engine, devices) || times->empty()) return absl::OkStatus();
  const size_t bytes = times->size() * sizeof(float);
  std::vector<float> mine(times->begin(), times->end());
  engine::CollectiveArgs args;
  args.dtype = DType::kF32;
  args.count = times->size();
  std::vector<engine::BufferId> buffers;
  absl::Cleanup free = [&] {
    for (engine::BufferId b : buffers) engine.Free(b);
  };
  for (int device : devices) {
    ASSIGN_OR_RETURN(const engine::BufferId buffer, engine.Allocate(device, bytes));
    buffers.push_back(buffer);
    const engine::BufferRef ref{buffer, 0, bytes};
    if (engine.IsLocalDevice(device)) RETURN_IF_ERROR(engine.CopyFromHost(ref, device, mine.data()));
    args.ranks.push_back(engine::RankBuffers{
        device, engine.GetStream(device, engine::StreamRole::kComm), ref, ref});
  }
  RETURN_IF_ERROR(engine.AllReduce(args));
  RETURN_IF_ERROR(engine.Synchronize(devices));
  for (size_t i = 0; i < devices.size(); ++i) {
    if (!engine.IsLocalDevice(devices[i])) continue;
    RETURN_IF_ERROR(engine.CopyToHost(mine.data(), args.ranks[i].recv, devices[i]));
    break;
  }
  for (size_t i = 0; i < times->size(); ++i) {
    (*times)[i] = static_cast<double>(mine[i]) / static_cast<double>(devices.size());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TimeLayerStep(engine::Engine& engine, const JobSpec& spec,
                           const std::vector<int>& devices, const RunHooks& hooks,
                           const std::vector<int>& order, JobReport* result,
                           TuningCache* tuning_cache) {
  if (order.size() < 2 || !spec.layer_step) return absl::OkStatus();
  const int device_count = static_cast<int>(devices.size());
  // result->ops follows `order`; the step follows the layer order.
  std::map<int, int> result_of;
  for (size_t i = 0; i < order.size(); ++i) result_of[order[i]] = static_cast<int>(i);
  const size_t n = spec.ops.size();
  // Each op's time alone and its collective's factor beside the GEMM ops, in
  // one vector that every node of a job spanning daemons agrees on.
  std::vector<double> figures(2 * n);
  std::vector<Transport> transports(n, Transport::kNccl);
  for (const auto& [spec_index, result_index] : result_of) {
    figures[spec_index] = FiguresOf(result->ops[result_index]).step.median;
    transports[spec_index] = ScheduleOf(result->ops[result_index]).transport;
  }
  const std::vector<double> factors =
      BesideGemmsFactors(engine, spec, devices, transports, tuning_cache);
  const auto half = static_cast<std::ptrdiff_t>(n);
  std::copy(factors.begin(), factors.end(), figures.begin() + half);
  RETURN_IF_ERROR(AgreeAcrossDaemons(engine, devices, &figures));
  const std::vector<double> alone_ms(figures.begin(), figures.begin() + half);
  const std::vector<double> beside(figures.begin() + half, figures.end());
  ASSIGN_OR_RETURN(const std::vector<int> layer_order, LayerOrder(spec, alone_ms, beside));
  std::vector<Member> members(layer_order.size());
  for (size_t i = 0; i < layer_order.size(); ++i) {
    members[i].spec_index = layer_order[i];
    members[i].op = spec.ops[layer_order[i]];
    members[i].schedule = ScheduleOf(result->ops[result_of.at(layer_order[i])]);
    members[i].alone_ms = alone_ms[layer_order[i]];
    members[i].beside_gemms = beside[layer_order[i]];
  }
  const std::vector<bool> deferred_collectives = DeferredCollectives(spec);
  bool any_main = false;
  for (size_t i = members.size(); i-- > 0;) {
    if (IsCollectiveOnly(members[i].op.type) && engine.StreamsPerRole() >= 2) {
      PlaceOnSideStreams(members, i, deferred_collectives[members[i].spec_index]);
    }
    any_main = any_main || !members[i].deferred;
  }
  // With nothing on the main streams, there is nothing to run beside.
  if (!any_main) {
    for (Member& m : members) m.deferred = false;
  }
  if (spec.bucket_mib > 0) {
    members = Bucket(std::move(members), int64_t{spec.bucket_mib} << 20, spec, device_count);
  }
  std::vector<std::string> scheduler_notes;
  if (spec.scheduler == Scheduler::kDynamic) {
    PlaceOnDeferredLane(members, spec, &scheduler_notes);
  } else {
    Chunk(members, spec, spec.chunk_kib, /*lane_only=*/false);
    Bound(members, spec.defer_bound_ms);
  }
  // Members stay where they are from here on.
  for (Member& m : members) {
    if (m.op.input.empty()) continue;
    for (const Member& from : members) {
      if (from.op.id == m.op.input) m.input_from = &from;
    }
  }

  for (Member& m : members) {
    const OpSpec& op = m.op;
    const int degree = GroupSize(spec.mesh, op.group, device_count);
    absl::StatusOr<std::unique_ptr<OpContext>> ctx = OpContext::Create(
        engine, op, spec.dtype, GroupMajorDevices(spec, devices, op.group),
        BuffersFor(op, degree, m.schedule), ops::RankLayout{degree, spec.mesh});
    if (!ctx.ok()) {
      if (!absl::IsResourceExhausted(ctx.status())) return ctx.status();
      result->layer_note = absl::StrCat(
          "no layer step: the buffers of every op do not fit in device memory at once (",
          ctx.status().message(), ")");
      return absl::OkStatus();
    }
    m.ctx = std::move(*ctx);
    RETURN_IF_ERROR(FillInputs(*m.ctx, spec.seed, ops::InputKeysOf(m.ctx->op())));
    RETURN_IF_ERROR(UseChainScale(*m.ctx));
    if (m.on_deferred_lane) {
      m.ctx->MoveToDeferredLane();
    } else if (m.deferred) {
      RETURN_IF_ERROR(m.ctx->MoveToSideStreams());
    }
  }
  RETURN_IF_ERROR(engine.Synchronize(devices));

  // The main streams' first op times the step; a GEMM op's GEMM is its head start.
  Member* main = nullptr;
  for (Member& m : members) {
    if (m.deferred) continue;
    if (main == nullptr ||
        (IsCollectiveOnly(main->ctx->op().type) && !IsCollectiveOnly(m.ctx->op().type))) {
      main = &m;
    }
  }
  const int count = static_cast<int>(order.size());
  OpRun run{engine, spec, hooks, count - 1, count, *main->ctx};
  run.label = "layer";
  const bool dynamic = spec.scheduler == Scheduler::kDynamic;
  auto enqueue = [&] {
    if (dynamic) return EnqueueLayerDynamic(members, *main->ctx, spec.defer_bound_ms).status();
    return EnqueueLayer(members, *main->ctx);
  };
  // A step dispatched at run time is enqueued live: never captured, never gated.
  bool replay = !dynamic;
  for (const Member& m : members) replay = replay && Replays(m.schedule.transport);

  // One direct iteration first: it sets up what capture must not (GEMM
  // algorithms of shapes not seen yet, communicator channel 1).
  RETURN_IF_ERROR(enqueue());
  RETURN_IF_ERROR(engine.Synchronize(devices));
  RETURN_IF_ERROR(run.ProbeHeat());
  // The float64 checks of the ops before it left the GPUs resting for seconds.
  RETURN_IF_ERROR(run.Preheat());
  ASSIGN_OR_RETURN(const TimedRun step,
                   run.Timed("step", std::max(1, std::min(spec.warmup, 5)), spec.iterations,
                             enqueue, ops::EventKind::kIterEnd, replay, /*gated=*/!dynamic));
  const bool step_replayed = step.replayed;
  LayerStepReport layer;
  layer.step = Summarize(step.times);
  layer.scheduler = SchedulerName(spec.scheduler);
  layer.captured = step_replayed;
  layer.scheduler_notes = std::move(scheduler_notes);
  RETURN_IF_ERROR(ReportDeferrals(run, members, *main->ctx, replay, spec, &layer));
  if (dynamic) {
    layer.lanes = engine.DescribeLanes();
    RETURN_IF_ERROR(ReportDispatch(members, *main->ctx, spec.defer_bound_ms,
                                   std::clamp(spec.iterations, 1, kDispatchIterations), &layer));
  }
  ASSIGN_OR_RETURN(
      layer.activation_ms,
      TimeActivationPasses(run, members, std::clamp(spec.iterations, 1, kActivationIterations)));
  double gemms_ms = 0;
  for (const OpMeasurement& op : result->ops) gemms_ms += FiguresOf(op).gemm_alone.median;
  layer.exposed_comm_ms = ExposedComm(layer, gemms_ms, Communicates(members, spec, device_count));
  for (int i : layer_order) layer.order.push_back(spec.ops[i].id);
  for (const Member& m : members) {
    if (!m.deferred) continue;
    layer.deferred.push_back(m.ctx->op().id);
    layer.joined_before.push_back(m.join_before);
  }

  if (spec.timeline) {
    std::vector<OpContext*> contexts;
    for (Member& m : members) contexts.push_back(m.ctx.get());
    ASSIGN_OR_RETURN(layer.timeline, TraceIteration(
                                         run, contexts,
                                         [&](TimelineEngine& tracer) {
                                           if (!dynamic) return EnqueueLayer(members, *main->ctx, &tracer);
                                           return EnqueueLayerDynamic(members, *main->ctx,
                                                                      spec.defer_bound_ms, &tracer)
                                               .status();
                                         },
                                         /*gated=*/!dynamic));
    layer.timeline->enqueued_not_replayed = step_replayed;
  }

  if (!spec.verify) {
    result->layer = std::move(layer);
    return absl::OkStatus();
  }
  // Run side by side, every op must still compute what it computes alone.
  run.heat_gemm_ms = 0;
  for (Member& m : members) RETURN_IF_ERROR(PoisonOutputs(*m.ctx));
  RETURN_IF_ERROR(
      run.Timed("verify", 0, 1, enqueue, ops::EventKind::kIterEnd, replay, !dynamic).status());
  ops::ChainReference chains(spec, device_count);
  for (Member& m : members) {
    const bool chained = !m.op.input.empty();
    Verification v;
    double tolerance = 0;
    if (chained) {
      ASSIGN_OR_RETURN(v, chains.Verify(m.spec_index, *m.ctx));
      tolerance = chains.Tolerance(m.spec_index);
    } else {
      ASSIGN_OR_RETURN(v, VerifyOutputs(*m.ctx, spec.seed, ops::InputKeysOf(m.ctx->op())));
      tolerance = OutputTolerance(m.ctx->op().type, spec.dtype, m.ctx->group_size());
    }
    if (!(v.max_rel_error <= tolerance)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "layer step: op %s (%s): verification%s failed: max|y-ref|/max|ref| = %.3g exceeds "
          "%.3g",
          m.ctx->op().id, m.schedule.Name(),
          chained ? absl::StrCat(" of the chain ", ChainName(spec, m.spec_index)) : "",
          v.max_rel_error, tolerance));
    }
    if (chained) {
      layer.chains.push_back(
          LayerChainCheck{m.op.id, ChainName(spec, m.spec_index), v.max_rel_error, tolerance});
    }
  }
  RETURN_IF_ERROR(HandOutOutputs(members, hooks));
  result->layer = std::move(layer);
  return absl::OkStatus();
}

}  // namespace overlap::runner
