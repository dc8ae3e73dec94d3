#include "server/runner/layer_step.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/graph_validator.h"
#include "server/ops/op_context.h"
#include "server/runner/op_report.h"
#include "server/runner/op_run.h"
#include "server/ops/reference.h"
#include "server/runner/traced_iteration.h"

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

struct Member {
  int spec_index = 0;  // the op's index in the spec: its input seeds
  OpSpec op;
  Schedule schedule;
  std::unique_ptr<OpContext> ctx;
  bool deferred = false;              // on the side streams
  std::string join_before;            // the first op that waits for it; "" = the end of the step
  std::vector<std::string> bucketed;  // a bucket: the ids of the all-reduces it merges
};

// Bucket inputs get seeds apart from every op's (an op's are its spec index).
constexpr int kBucketSeedBase = 1 << 20;
// A bucket's rows: long enough for whole cache lines, padded to whole rows per rank.
constexpr int64_t kBucketRowElements = 1024;

// Merges runs of deferred all-reduces over one transport and algorithm, each at most
// `cap_bytes`, into buckets of at most `cap_bytes`: one all-reduce of their
// elements (padded to whole rows), where the last of them ran. A bucket of
// one stays that op. An op that waits on a member of the bucket being filled
// closes it first: merged, or fired after the op, that member would no longer
// come before it.
std::vector<Member> Bucket(std::vector<Member> members, int64_t cap_bytes, DType dtype, int tp) {
  // What an all_reduce sums (BufferDTypesFor: bf16 in an fp8 graph).
  const int64_t es = static_cast<int64_t>(DTypeSize(BufferDTypesFor(OpType::kAllReduce, dtype).a));
  auto bucketable = [&](const Member& m) {
    return m.deferred && m.join_before.empty() && m.op.type == OpType::kAllReduce &&
           m.op.m * m.op.n * es <= cap_bytes;
  };
  std::vector<Member> out;
  std::vector<Member> open;  // the bucket being filled
  int64_t open_bytes = 0;
  int buckets = 0;
  auto close = [&] {
    if (open.size() == 1) out.push_back(std::move(open[0]));
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
      b.op.n = kBucketRowElements;
      const int64_t rows = (elements + kBucketRowElements - 1) / kBucketRowElements;
      b.op.m = (rows + tp - 1) / tp * tp;
      b.op.mode = OverlapMode::kSerial;
      b.op.transport = b.schedule.transport;
      b.op.algorithm = b.schedule.algorithm;
      out.push_back(std::move(b));
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
         open[0].schedule.algorithm != m.schedule.algorithm)) {
      close();
    }
    open_bytes += bytes;
    open.push_back(std::move(m));
  }
  close();
  return out;
}

absl::StatusOr<Schedule> ScheduleOf(const v1::OpResult& r) {
  ASSIGN_OR_RETURN(OverlapMode mode, ParseOverlapMode(r.mode()));
  ASSIGN_OR_RETURN(Transport transport, ParseTransport(r.transport()));
  ASSIGN_OR_RETURN(AllReduceAlgorithm algorithm, ParseStoredAllReduceAlgorithm(r.algorithm()));
  return Schedule{mode, std::max(1, r.chunks()), transport, algorithm};
}

// The main streams wait for the deferred ops that join before `id` ("" = the end).
absl::Status JoinBefore(std::vector<Member>& members, const std::string& id, OpContext& main) {
  for (Member& m : members) {
    if (!m.deferred || m.join_before != id) continue;
    for (int r = 0; r < main.tp(); ++r) {
      RETURN_IF_ERROR(m.ctx->Wait(main.rank(r).compute, r, ops::EventKind::kLayerDone));
    }
  }
  return absl::OkStatus();
}

// One layer iteration: each op on its streams in order; a deferred op starts
// on its side streams once the main streams reach it, and the main streams
// wait for it before the first op that needs it, or at the end.
// `tracer`, when set, labels the spans of each op with its id.
absl::Status EnqueueLayer(std::vector<Member>& members, OpContext& main,
                          TimelineEngine* tracer = nullptr) {
  for (size_t i = 0; i < members.size(); ++i) {
    Member& m = members[i];
    OpContext& ctx = *m.ctx;
    if (tracer != nullptr) tracer->SetLabel(m.op.id);
    RETURN_IF_ERROR(JoinBefore(members, m.op.id, main));
    if (m.deferred) {
      for (int r = 0; r < main.tp(); ++r) {
        RETURN_IF_ERROR(main.Record(r, main.rank(r).compute, ops::EventKind::kLayerFork, static_cast<int>(i)));
        RETURN_IF_ERROR(main.Wait(ctx.rank(r).compute, r, ops::EventKind::kLayerFork, static_cast<int>(i)));
      }
    }
    RETURN_IF_ERROR(EnqueueOp(ctx, m.schedule));
    if (m.deferred) {
      for (int r = 0; r < ctx.tp(); ++r) {
        RETURN_IF_ERROR(ctx.Record(r, ctx.rank(r).compute, ops::EventKind::kLayerDone));
      }
    }
  }
  return JoinBefore(members, "", main);
}

// Whether the collective alone at members[i] goes to the side streams, and
// before which op it joins back; the members after it are placed already.
// It joins before the first op on the main streams that waits on it (ops on
// the side streams run after it on them anyway), or at the end of the step.
// It goes to the side when a GEMM op can run beside it before that join, or
// when nothing on the main streams waits on it (a gradient all-reduce, which
// may then share a bucket).
void PlaceOnSideStreams(std::vector<Member>& members, size_t i) {
  const std::string& id = members[i].op.id;
  size_t first_waiter = members.size();
  for (size_t j = i + 1; j < members.size() && first_waiter == members.size(); ++j) {
    const std::vector<std::string>& after = members[j].op.after;
    const bool waits = std::find(after.begin(), after.end(), id) != after.end();
    if (waits && !members[j].deferred) first_waiter = j;
  }
  if (first_waiter == members.size()) {
    members[i].deferred = true;
    return;
  }
  bool gemm_beside = false;
  for (size_t j = i + 1; j < first_waiter; ++j) {
    gemm_beside = gemm_beside || !IsCollectiveOnly(members[j].op.type);
  }
  members[i].deferred = gemm_beside;
  members[i].join_before = gemm_beside ? members[first_waiter].op.id : "";
}

// How much longer than alone a collective is taken to run beside the GEMM ops
// when LayerOrder checks that it fits: they contend for HBM and NVLink and,
// over NCCL, for SMs.
constexpr double kBesideGemmsFactor = 1.5;

// The layer step's clock as LayerOrder builds the order, from each op's time
// alone: the GEMM ops run back to back on the main streams, the collectives
// alone one after another on the side stream, each no earlier than the main
// streams reach the point it was sent at.
class StepClock {
 public:
  // `ms`: each op's time alone, by spec index; empty when not known.
  StepClock(const JobSpec& spec, std::vector<double> ms) : spec_(spec), ms_(std::move(ms)) {
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
      side_free_ = std::max(side_free_, main_) + kBesideGemmsFactor * ms_[op];
    } else {
      main_ += ms_[op];
    }
  }

  // Whether collective `op`, sent now, would be off the side stream before
  // every critical collective still to send could go (at the earliest, once
  // the GEMM ops it waits on ran): it then queues ahead of none. Without
  // times, only when no critical collective is left to send.
  bool FitsBeforeTheCriticalOnes(int op) const {
    const double end =
        std::max(side_free_, main_) + kBesideGemmsFactor * (ms_.empty() ? 0 : ms_[op]);
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
  const JobSpec& spec_;
  const std::vector<double> ms_;
  // Each critical collective (a collective alone that an op waits on) and the
  // GEMM ops it waits on, directly or not.
  std::map<int, std::vector<int>> gemm_ancestors_;
  std::vector<bool> done_;
  double main_ = 0;       // when the main streams finish the ops picked so far
  double side_free_ = 0;  // when the side stream does
};

}  // namespace

absl::StatusOr<std::vector<int>> LayerOrder(const JobSpec& spec, const std::vector<double>& ms) {
  StepClock clock(spec, ms.size() == spec.ops.size() ? ms : std::vector<double>{});
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

absl::Status TimeLayerStep(engine::Engine& engine, const JobSpec& spec,
                           const std::vector<int>& devices, const RunHooks& hooks,
                           const std::vector<int>& order, v1::JobResult* result) {
  if (order.size() < 2 || !spec.layer_step) return absl::OkStatus();
  const int tp = static_cast<int>(devices.size());
  // result->ops() follows `order`; the step follows the layer order.
  std::map<int, int> result_of;
  for (size_t i = 0; i < order.size(); ++i) result_of[order[i]] = static_cast<int>(i);
  std::vector<double> alone_ms(spec.ops.size());
  for (const auto& [spec_index, result_index] : result_of) {
    alone_ms[spec_index] = result->ops(result_index).step().median_ms();
  }
  ASSIGN_OR_RETURN(const std::vector<int> layer_order, LayerOrder(spec, alone_ms));
  std::vector<Member> members(layer_order.size());
  for (size_t i = 0; i < layer_order.size(); ++i) {
    members[i].spec_index = layer_order[i];
    members[i].op = spec.ops[layer_order[i]];
    ASSIGN_OR_RETURN(members[i].schedule, ScheduleOf(result->ops(result_of.at(layer_order[i]))));
  }
  bool any_main = false;
  for (size_t i = members.size(); i-- > 0;) {
    if (IsCollectiveOnly(members[i].op.type) && engine.StreamsPerRole() >= 2) {
      PlaceOnSideStreams(members, i);
    }
    any_main = any_main || !members[i].deferred;
  }
  // With nothing on the main streams, there is nothing to run beside.
  if (!any_main) {
    for (Member& m : members) m.deferred = false;
  }
  if (spec.bucket_mib > 0) {
    members = Bucket(std::move(members), int64_t{spec.bucket_mib} << 20, spec.dtype, tp);
  }

  for (Member& m : members) {
    const OpSpec& op = m.op;
    absl::StatusOr<std::unique_ptr<OpContext>> ctx =
        OpContext::Create(engine, op, spec.dtype, devices, BuffersFor(op, tp, m.schedule));
    if (!ctx.ok()) {
      if (!absl::IsResourceExhausted(ctx.status())) return ctx.status();
      result->set_layer_note(absl::StrCat(
          "no layer step: the buffers of every op do not fit in device memory at once (",
          ctx.status().message(), ")"));
      return absl::OkStatus();
    }
    m.ctx = std::move(*ctx);
    RETURN_IF_ERROR(FillInputs(*m.ctx, spec.seed, m.spec_index));
    if (m.deferred) RETURN_IF_ERROR(m.ctx->MoveToSideStreams());
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
  auto enqueue = [&] { return EnqueueLayer(members, *main->ctx); };
  bool replay = true;
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
                             enqueue, ops::EventKind::kIterEnd, replay));
  const bool step_replayed = step.replayed;
  *result->mutable_layer_step() = ToProto(Summarize(step.times));
  double gemms_ms = 0;
  for (const v1::OpResult& op : result->ops()) gemms_ms += op.gemm_alone().median_ms();
  result->set_layer_exposed_comm_ms(std::max(0.0, result->layer_step().median_ms() - gemms_ms));
  for (int i : layer_order) result->add_layer_order(spec.ops[i].id);
  for (const Member& m : members) {
    if (!m.deferred) continue;
    result->add_layer_deferred(m.ctx->op().id);
    result->add_layer_joined_before(m.join_before);
  }

  if (spec.timeline) {
    std::vector<OpContext*> contexts;
    for (Member& m : members) contexts.push_back(m.ctx.get());
    ASSIGN_OR_RETURN(*result->mutable_layer_timeline(),
                     TraceIteration(run, contexts, [&](TimelineEngine& tracer) {
                       return EnqueueLayer(members, *main->ctx, &tracer);
                     }));
    result->mutable_layer_timeline()->set_enqueued_not_replayed(step_replayed);
  }

  if (!spec.verify) return absl::OkStatus();
  // Run side by side, every op must still compute what it computes alone.
  run.heat_gemm_ms = 0;
  for (Member& m : members) RETURN_IF_ERROR(PoisonOutputs(*m.ctx));
  RETURN_IF_ERROR(run.Timed("verify", 0, 1, enqueue, ops::EventKind::kIterEnd, replay).status());
  for (Member& m : members) {
    ASSIGN_OR_RETURN(Verification v, VerifyOutputs(*m.ctx, spec.seed, m.spec_index));
    const double tolerance = OutputTolerance(m.ctx->op().type, spec.dtype, m.ctx->tp());
    if (!(v.max_rel_error <= tolerance)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "layer step: op %s (%s): verification failed: max|y-ref|/max|ref| = %.3g exceeds %.3g",
          m.ctx->op().id, m.schedule.Name(), v.max_rel_error, tolerance));
    }
  }
  return absl::OkStatus();
}

}  // namespace overlap::runner
