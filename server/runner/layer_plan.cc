#include "server/runner/layer_plan.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/deferred_collectives.h"
#include "common/graph_validator.h"
#include "common/status_macros.h"
#include "server/ops/op_context.h"
#include "server/runner/op_phases.h"

namespace overlap::runner {
namespace {

// With chunk_kib 0, the shortest chunk by its time alone (PlaceOnDeferredLane).
constexpr double kMinDynamicChunkMs = 0.2;

// What an all_reduce sums, in bytes an element (BufferDTypesFor: bf16 in an fp8 graph).
int64_t AllReduceElementBytes(const JobSpec& spec) {
  return static_cast<int64_t>(DTypeSize(ops::BufferDTypesFor(OpType::kAllReduce, spec.dtype).a));
}

// Whether another op reads this one's output: it must be whole when that one
// runs, so it is not cut into pieces sent later.
bool IsRead(const JobSpec& spec, const OpSpec& op) {
  for (const OpSpec& other : spec.ops) {
    if (other.input == op.id) return true;
  }
  return false;
}

// Whether `m` may be cut (an all-reduce, not hierarchical, whose rows need not
// divide over the mesh, and not read by another op).
bool Cuttable(const JobSpec& spec, const PlannedOp& m) {
  return m.op.type == OpType::kAllReduce && !IsRead(spec, m.op) &&
         m.schedule.algorithm != AllReduceAlgorithm::kHierarchical;
}

// Cuts `m`'s rows into pieces of about `chunk_bytes` each (`es` bytes an
// element); leaves it whole when it is no larger.
void CutIntoPieces(PlannedOp& m, int64_t chunk_bytes, int64_t es) {
  if (m.op.m * m.op.n * es <= chunk_bytes) return;
  const int64_t rows = std::max<int64_t>(1, chunk_bytes / (m.op.n * es));
  for (int64_t row = 0; row < m.op.m; row += rows) {
    m.pieces.push_back(ops::RowRange{row, std::min(rows, m.op.m - row)});
  }
}

// scheduler: static: cuts each deferred all-reduce but a bucket larger than
// chunk_kib KiB into pieces of about that many rows' bytes.
void Chunk(std::vector<PlannedOp>& members, const JobSpec& spec) {
  if (spec.chunk_kib <= 0) return;
  const int64_t chunk_bytes = int64_t{spec.chunk_kib} << 10;
  for (PlannedOp& m : members) {
    if (m.deferred && m.bucketed.empty() && Cuttable(spec, m)) {
      CutIntoPieces(m, chunk_bytes, AllReduceElementBytes(spec));
    }
  }
}

// Bucket inputs get seeds apart from every op's (an op's are its spec index).
constexpr int kBucketSeedBase = 1 << 20;
// A bucket's rows: long enough for whole cache lines, padded to whole rows per rank.
constexpr int64_t kBucketRowElements = 1024;

// Merges runs of deferred all-reduces over one transport, algorithm and group,
// each at most `cap_bytes`, into buckets of at most `cap_bytes`: one
// all-reduce of their elements (padded to whole rows), sent where the last of
// them stands, before the ops that follow it, as DDP fires a bucket once its
// last gradient is ready. A bucket of one stays that op. An op that waits on a
// member of the bucket being filled closes it first: merged, or fired after
// the op, that member would no longer come before it.
std::vector<PlannedOp> Bucket(std::vector<PlannedOp> members, int64_t cap_bytes,
                              const JobSpec& spec, int device_count) {
  const int64_t es = AllReduceElementBytes(spec);
  // With chunking on, an all-reduce larger than a chunk is chunked instead.
  const int64_t max_bytes =
      spec.chunk_kib > 0 ? std::min(cap_bytes, int64_t{spec.chunk_kib} << 10) : cap_bytes;
  auto bucketable = [&](const PlannedOp& m) {
    // An op in a chain (it reads another's output, or another reads its) has
    // tensors of its own, not a bucket's.
    return m.deferred && m.join_before.empty() && m.op.type == OpType::kAllReduce &&
           m.op.input.empty() && !IsRead(spec, m.op) &&
           m.op.algorithm != AllReduceAlgorithm::kHierarchical && m.op.m * m.op.n * es <= max_bytes;
  };
  std::vector<PlannedOp> out;
  std::vector<PlannedOp> open;  // the bucket being filled
  int64_t open_bytes = 0;
  size_t fire_at = 0;  // where in `out` its last member stands: the bucket goes there
  int buckets = 0;
  auto close = [&] {
    const auto at = out.begin() + static_cast<std::ptrdiff_t>(fire_at);
    if (open.size() == 1) out.insert(at, std::move(open[0]));
    if (open.size() > 1) {
      PlannedOp b;
      b.spec_index = kBucketSeedBase + buckets++;
      b.schedule = open[0].schedule;
      b.deferred = true;
      int64_t elements = 0;
      for (const PlannedOp& m : open) {
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
      for (const PlannedOp& m : open) {
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
  auto waits_on_open = [&](const PlannedOp& m) {
    for (const PlannedOp& o : open) {
      if (std::find(m.op.after.begin(), m.op.after.end(), o.op.id) != m.op.after.end()) {
        return true;
      }
    }
    return false;
  };
  for (PlannedOp& m : members) {
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

// A deferred op that nothing waits on joins the main streams before the first
// op that starts defer_bound_ms or more after it was sent, by the ops' times
// alone (the main streams' ops back to back), or at the end of the step.
void Bound(std::vector<PlannedOp>& members, double bound_ms) {
  for (size_t i = 0; i < members.size(); ++i) {
    PlannedOp& m = members[i];
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
void PlaceOnSideStreams(std::vector<PlannedOp>& members, size_t i, bool deferred_collective) {
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

// The deferred lane's members (scheduler: dynamic): the deferred ops that
// nothing waits on, in chunks of chunk_kib (kDynamicChunkKib when 0); appends
// to `notes` where the bound or the chunk size cannot be kept.
void PlaceOnDeferredLane(std::vector<PlannedOp>& members, const JobSpec& spec,
                         std::vector<std::string>* notes) {
  const int64_t es = AllReduceElementBytes(spec);
  const int chunk_kib = spec.chunk_kib > 0 ? spec.chunk_kib : kDynamicChunkKib;
  for (PlannedOp& m : members) {
    m.on_deferred_lane = m.deferred && m.join_before.empty();
    if (!m.on_deferred_lane || !Cuttable(spec, m)) continue;
    int64_t chunk_bytes = int64_t{chunk_kib} << 10;
    // Left to us (chunk_kib 0), a chunk is also long enough by its time alone
    // that the host's cost of one (an issue, two events, a poll: tens of
    // microseconds) stays a small share: 256 KiB chunks of a 235 MB gradient
    // kept a shared H100's deferred lane waiting on the host 40 us a chunk.
    const int64_t bytes = m.op.m * m.op.n * es;
    if (spec.chunk_kib == 0 && m.alone_ms > 0) {
      const double most_chunks = std::max(1.0, m.alone_ms / kMinDynamicChunkMs);
      chunk_bytes = std::max(chunk_bytes, static_cast<int64_t>(bytes / most_chunks));
    }
    CutIntoPieces(m, chunk_bytes, es);
  }
  for (const PlannedOp& m : members) {
    if (!m.on_deferred_lane) continue;
    const double chunk_ms = BesideGemmsOf(m) * m.alone_ms / Pieces(m);
    if (m.pieces.empty() && m.op.type == OpType::kAllReduce) {
      notes->push_back(absl::StrFormat(
          "%s: no larger than a chunk (%d KiB%s), or not cut (a hierarchical or read "
          "all-reduce): sent whole",
          m.op.id, chunk_kib,
          spec.chunk_kib == 0 ? absl::StrFormat(", or %.2g ms alone", kMinDynamicChunkMs) : ""));
    }
    if (chunk_ms >= spec.defer_bound_ms) {
      notes->push_back(absl::StrFormat(
          "%s: defer_bound_ms %.3g is below one chunk's expected time (%.3g ms): its chunks go "
          "as soon as its input is ready, critical work or not",
          m.op.id, spec.defer_bound_ms, chunk_ms));
    }
  }
}

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

// Each op of `order` with its figures, on the main streams or, with side
// streams, on the side streams where PlaceOnSideStreams puts it.
std::vector<PlannedOp> Place(const JobSpec& spec, const std::vector<int>& order,
                             const PlanFigures& figures, bool side_streams) {
  std::vector<PlannedOp> ops(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    ops[i].spec_index = order[i];
    ops[i].op = spec.ops[order[i]];
    ops[i].schedule = figures.schedules[order[i]];
    ops[i].alone_ms = figures.alone_ms[order[i]];
    ops[i].beside_gemms = figures.beside_gemms[order[i]];
  }
  const std::vector<bool> deferred_collectives = DeferredCollectives(spec);
  bool any_main = false;
  for (size_t i = ops.size(); i-- > 0;) {
    if (IsCollectiveOnly(ops[i].op.type) && side_streams) {
      PlaceOnSideStreams(ops, i, deferred_collectives[ops[i].spec_index]);
    }
    any_main = any_main || !ops[i].deferred;
  }
  // With nothing on the main streams, there is nothing to run beside.
  if (!any_main) {
    for (PlannedOp& op : ops) op.deferred = false;
  }
  return ops;
}

// The main streams' first op times the step; a GEMM op's GEMM is its head start.
int TimedBy(const std::vector<PlannedOp>& ops) {
  int timed_by = -1;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].deferred) continue;
    if (timed_by < 0 ||
        (IsCollectiveOnly(ops[timed_by].op.type) && !IsCollectiveOnly(ops[i].op.type))) {
      timed_by = static_cast<int>(i);
    }
  }
  return std::max(timed_by, 0);
}

}  // namespace

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

int Pieces(const PlannedOp& op) { return std::max<int>(1, static_cast<int>(op.pieces.size())); }

absl::StatusOr<LayerPlan> PlanLayerStep(const JobSpec& spec, const std::vector<int>& devices,
                                        const PlanFigures& figures, bool side_streams) {
  const size_t n = spec.ops.size();
  if (figures.schedules.size() != n || figures.alone_ms.size() != n ||
      figures.beside_gemms.size() != n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layer plan: figures for %d, %d and %d ops (schedules, times alone, factors) of %d",
        figures.schedules.size(), figures.alone_ms.size(), figures.beside_gemms.size(), n));
  }
  LayerPlan plan;
  ASSIGN_OR_RETURN(plan.order, LayerOrder(spec, figures.alone_ms, figures.beside_gemms));
  plan.ops = Place(spec, plan.order, figures, side_streams);
  if (spec.bucket_mib > 0) {
    plan.ops = Bucket(std::move(plan.ops), int64_t{spec.bucket_mib} << 20, spec,
                      static_cast<int>(devices.size()));
  }
  if (spec.scheduler == Scheduler::kDynamic) {
    PlaceOnDeferredLane(plan.ops, spec, &plan.notes);
  } else {
    Chunk(plan.ops, spec);
    Bound(plan.ops, spec.defer_bound_ms);
  }
  for (PlannedOp& op : plan.ops) op.devices = GroupMajorDevices(spec, devices, op.op.group);
  plan.timed_by = TimedBy(plan.ops);
  return plan;
}

std::vector<LayerDeferral> Deferrals(const LayerPlan& plan, const JobSpec& spec) {
  std::vector<LayerDeferral> deferrals;
  for (const PlannedOp& op : plan.ops) {
    if (!op.deferred) continue;
    LayerDeferral& d = deferrals.emplace_back();
    d.op = op.op.id;
    d.how = !op.pieces.empty() ? "chunked" : !op.bucketed.empty() ? "bucketed" : "whole";
    d.pieces = Pieces(op);
    d.piece_bytes =
        op.pieces.empty() ? 0 : op.pieces[0].rows * op.op.n * AllReduceElementBytes(spec);
    d.joined_before = op.join_before;
    d.alone_ms = op.alone_ms;
    d.dispatched = op.on_deferred_lane;
  }
  return deferrals;
}

}  // namespace overlap::runner
