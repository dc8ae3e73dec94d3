// Timelines on the host backend: TimelineEngine's spans (names, lanes, order,
// what it leaves untraced) and the traced iteration the job runner adds to each
// op's result.
#include "server/runner/timeline.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "server/engine/host/host_engine.h"
#include "server/runner/job_runner.h"
#include "server/runner/traced_iteration.h"
#include "tests/host_engine_util.h"
#include "tests/job_result_util.h"
#include "tests/op_spec_util.h"

namespace overlap::runner {
namespace {

using ::testing::ElementsAre;

std::unique_ptr<engine::Engine> Engine() { return CheckedHostEngine(); }

TEST(TimelineEngineTest, BracketsWorkOnItsLanesAndLeavesOtherStreamsUntraced) {
  auto inner = Engine();
  const int64_t m = 64, k = 32, n = 48;
  const size_t f = sizeof(float);
  auto a = inner->Allocate(0, m * k * f), w = inner->Allocate(0, k * n * f),
       c = inner->Allocate(0, m * n * f), peer = inner->Allocate(1, m * n * f),
       other = inner->Allocate(1, f), c2 = inner->Allocate(0, m * n * f);
  ASSERT_TRUE(a.ok() && w.ok() && c.ok() && peer.ok() && other.ok() && c2.ok());
  const engine::StreamId compute0 = inner->GetStream(0, engine::StreamRole::kCompute);
  const engine::StreamId comm0 = inner->GetStream(0, engine::StreamRole::kComm);
  const engine::StreamId compute1 = inner->GetStream(1, engine::StreamRole::kCompute);
  auto origin = inner->CreateEvent(0), done = inner->CreateEvent(0);
  ASSERT_TRUE(origin.ok() && done.ok());

  TimelineEngine tracer(
      *inner, {TimelineLane{compute0, 0, 0, "compute"}, TimelineLane{comm0, 0, 0, "comm"}});
  ASSERT_TRUE(tracer.FillRandom(compute0, {*a, 0, m * k * f}, DType::kF32, 1, 1.0f).ok());
  ASSERT_TRUE(tracer.FillRandom(compute0, {*w, 0, k * n * f}, DType::kF32, 2, 1.0f).ok());
  tracer.Clear();  // the inputs are not part of the iteration
  ASSERT_TRUE(inner->Synchronize({0, 1}).ok());
  ASSERT_TRUE(tracer.RecordEvent(*origin, compute0).ok());
  engine::GemmArgs gemm;
  gemm.dtype = DType::kF32;
  gemm.m = m;
  gemm.n = n;
  gemm.k = k;
  gemm.a = {*a, 0, k};
  gemm.b = {*w, 0, n};
  gemm.c = {*c, 0, n};
  gemm.beta = 1.0f;
  ASSERT_TRUE(tracer.Gemm(compute0, gemm).ok());
  ASSERT_TRUE(tracer.RecordEvent(*done, compute0).ok());
  ASSERT_TRUE(tracer.WaitEvent(comm0, *done).ok());
  ASSERT_TRUE(tracer.PeerCopy(comm0, {*peer, 0, m * n * f}, 1, {*c, 0, m * n * f}, 0).ok());
  // Device 1's stream has no lane: its work runs, untraced.
  ASSERT_TRUE(tracer.FillConstant(compute1, {*other, 0, f}, DType::kF32, 0.0f).ok());
  // Back to back on the compute stream: the second GEMM starts where the first
  // ended (one event between them, not two); after a wait it gets its own start.
  gemm.c = {*c2, 0, n};  // the copy still reads c
  ASSERT_TRUE(tracer.Gemm(compute0, gemm).ok());
  ASSERT_TRUE(tracer.WaitEvent(compute0, *done).ok());
  ASSERT_TRUE(tracer.Gemm(compute0, gemm).ok());
  ASSERT_TRUE(tracer.Synchronize({0, 1}).ok());

  auto spans = tracer.Collect({*origin});
  ASSERT_TRUE(spans.ok()) << spans.status();
  ASSERT_EQ(spans->size(), 4u);
  EXPECT_EQ((*spans)[2].start_ms, (*spans)[0].end_ms);
  EXPECT_GE((*spans)[3].start_ms, (*spans)[2].end_ms);
  const TimelineSpan& g = (*spans)[0];
  const TimelineSpan& copy = (*spans)[1];
  EXPECT_EQ(g.rank, 0);
  EXPECT_EQ(g.lane, "compute");
  EXPECT_EQ(g.kind, "gemm");
  EXPECT_EQ(g.name, "gemm 64x32x48 +=");
  EXPECT_EQ(copy.lane, "comm");
  EXPECT_EQ(copy.kind, "copy");
  EXPECT_EQ(copy.name, "copy 12.00 KiB r0->device 1");
  EXPECT_GE(g.start_ms, 0.0);
  EXPECT_GE(g.end_ms, g.start_ms);
  // The copy waited for the GEMM.
  EXPECT_GE(copy.start_ms, g.end_ms);
  EXPECT_GE(copy.end_ms, copy.start_ms);

  auto no_origin = tracer.Collect({});
  EXPECT_EQ(no_origin.status().code(), absl::StatusCode::kInternal);
  inner->DestroyEvent(*origin);
  inner->DestroyEvent(*done);
}

TEST(TimelineEngineTest, ComputeWaitIsEachRanksIdleComputeTimeUpToItsLastSpan) {
  Timeline t;
  auto span = [&](int rank, const char* lane, double start, double end) {
    TimelineSpan& s = t.spans.emplace_back();
    s.rank = rank;
    s.lane = lane;
    s.start_ms = start;
    s.end_ms = end;
  };
  span(0, "compute", 0.5, 1.0);
  span(0, "compute", 1.5, 2.0);
  span(0, "comm", 0.0, 2.5);  // ends last: rank 0 waited 2.5 - 1.0
  span(1, "compute", 0.0, 3.0);
  span(7, "compute", 0.0, 1.0);  // no such rank: ignored
  EXPECT_THAT(ComputeWaitByRank(t, 3), ElementsAre(1.5, 0.0, 0.0));
}

JobSpec RingJob() {
  JobSpec spec;
  spec.name = "ring";
  spec.dtype = DType::kF32;
  spec.iterations = 2;
  spec.warmup = 1;
  OpSpec op = MakeOp("fc2", OpType::kGemmRs, 128, 96, 64);
  op.mode = OverlapMode::kRing;
  op.chunks = 2;
  op.transport = Transport::kP2p;
  spec.ops = {op};
  return spec;
}

TEST(TimelineTest, EachOpResultHasOneTracedIterationOfItsSchedule) {
  auto engine = Engine();
  std::vector<std::string> phases;
  RunHooks hooks;
  hooks.on_progress = [&](const Progress& p) {
    if (phases.empty() || phases.back() != p.phase) phases.push_back(p.phase);
  };
  auto result = RunJobResult(*engine, RingJob(), {0, 1}, hooks, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->ops_size(), 1);
  const v1::OpResult& op = result->ops(0);
  ASSERT_TRUE(op.has_timeline());
  // Traced after the timed rounds and before the check against float64.
  const auto traced = std::find(phases.begin(), phases.end(), "timeline");
  ASSERT_NE(traced, phases.end());
  EXPECT_EQ(*(traced + 1), "verify");

  const v1::Timeline& t = op.timeline();
  EXPECT_GT(t.step_ms(), 0.0);
  ASSERT_EQ(op.compute_wait_rank_ms_size(), 2);
  for (double ms : op.compute_wait_rank_ms()) {
    EXPECT_GE(ms, 0.0);
    EXPECT_LE(ms, t.step_ms());
  }
  EXPECT_FALSE(t.enqueued_not_replayed());  // the host backend replays nothing
  // ring/2 at tp = 2, per rank: the peer's block in two pieces, each copied to
  // the peer as soon as it is done, then the own block in two pieces with
  // beta = 1 on top of what arrived.
  std::map<int, std::vector<std::string>> compute, comm;
  for (const v1::TimelineSpan& s : t.spans()) {
    EXPECT_GE(s.start_ms(), 0.0) << s.name();
    EXPECT_GE(s.end_ms(), s.start_ms()) << s.name();
    EXPECT_LE(s.end_ms(), t.step_ms() + 1e-9) << s.name();
    (s.lane() == "compute" ? compute : comm)[s.rank()].push_back(s.name());
  }
  for (int r = 0; r < 2; ++r) {
    // Per-rank GEMM: 64 rows of the peer's or own block (m / tp = 64, two
    // pieces of 32), k / tp = 48, n = 64.
    EXPECT_THAT(compute[r], ElementsAre("gemm 32x48x64", "gemm 32x48x64",
                                        "gemm 32x48x64 +=", "gemm 32x48x64 +="))
        << "rank " << r;
  }
  // Every piece crosses once in each direction: 32 rows x 64 fp32 = 8 KiB.
  std::vector<std::string> copies;
  for (int r = 0; r < 2; ++r) copies.insert(copies.end(), comm[r].begin(), comm[r].end());
  std::sort(copies.begin(), copies.end());
  EXPECT_THAT(copies, ElementsAre("copy 8.00 KiB r0->r1", "copy 8.00 KiB r0->r1",
                                  "copy 8.00 KiB r1->r0", "copy 8.00 KiB r1->r0"));
}

// Over NCCL the ring's pieces cross as send/recv groups: one span per rank's
// comm stream for each, saying what it sends and what it receives.
TEST(TimelineTest, SendRecvGroupsAreOneSpanPerStream) {
  auto engine = Engine();
  JobSpec spec = RingJob();
  spec.ops[0].transport = Transport::kNccl;
  auto result = RunJobResult(*engine, spec, {0, 1}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  std::map<int, std::vector<std::string>> comm;
  for (const v1::TimelineSpan& s : result->ops(0).timeline().spans()) {
    if (s.lane() != "comm") continue;
    EXPECT_EQ(s.kind(), "sendrecv");
    comm[s.rank()].push_back(s.name());
  }
  EXPECT_THAT(comm[0], ElementsAre("send 8.00 KiB to r1, recv 8.00 KiB from r1",
                                   "send 8.00 KiB to r1, recv 8.00 KiB from r1"));
  EXPECT_THAT(comm[1], ElementsAre("send 8.00 KiB to r0, recv 8.00 KiB from r0",
                                   "send 8.00 KiB to r0, recv 8.00 KiB from r0"));
}

TEST(TimelineTest, LayerStepTimelineLabelsEachOpsSpansAndShowsTheSideStream) {
  auto engine = Engine();
  JobSpec spec = RingJob();
  spec.ops[0].m = 256;
  spec.ops.insert(spec.ops.begin(), MakeOp("fc1", OpType::kAgGemm, 256, 64, 96));
  spec.ops[0].mode = OverlapMode::kSerial;
  spec.ops[0].transport = Transport::kNccl;
  spec.ops[1].k = 96;
  spec.ops[1].after = {"fc1"};
  spec.ops.push_back(MakeOp("grads", OpType::kAllReduce, 64, 0, 64, {"fc1"}));
  spec.ops.back().transport = Transport::kNccl;
  auto result = RunJobResult(*engine, spec, {0, 1}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(result->has_layer_timeline());
  const v1::Timeline& t = result->layer_timeline();
  EXPECT_GT(t.step_ms(), 0.0);
  std::map<std::string, std::map<std::string, int>> lanes_of_op;  // op -> lane -> spans
  for (const v1::TimelineSpan& s : t.spans()) {
    ++lanes_of_op[s.op()][s.lane()];
    EXPECT_LE(s.end_ms(), t.step_ms() + 1e-9) << s.op() << " " << s.name();
  }
  // Per rank: fc1 one GEMM and one all-gather; fc2 four GEMMs and a copy each
  // way; grads, deferred, one all-reduce on the side stream.
  EXPECT_EQ(lanes_of_op["fc1"]["compute"], 2 * 2);
  EXPECT_EQ(lanes_of_op["fc2"]["compute"], 2 * 4);
  EXPECT_EQ(lanes_of_op["fc2"]["comm"], 2 * 2);
  EXPECT_EQ(lanes_of_op["grads"]["side"], 2);
  EXPECT_EQ(lanes_of_op["grads"].size(), 1u);
}

TEST(TimelineTest, GraphCanTurnItOff) {
  auto engine = Engine();
  JobSpec spec = RingJob();
  spec.timeline = false;
  spec.ops.push_back(MakeOp("out", OpType::kGemmAr, 128, 96, 64, {"fc2"}));
  auto result = RunJobResult(*engine, spec, {0, 1}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->ops(0).has_timeline());
  EXPECT_TRUE(result->has_layer_step());
  EXPECT_FALSE(result->has_layer_timeline());
}

}  // namespace
}  // namespace overlap::runner
