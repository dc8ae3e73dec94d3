// The layer step's plan, without an engine: placement on a mesh's devices and
// streams, buckets, chunks, deferrals and their bounds, the deferred lane
// under scheduler: dynamic, and the figures it refuses.
#include "server/runner/layer_plan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/op_spec_util.h"

namespace overlap::runner {
namespace {

OpSpec Op(const std::string& id, OpType type, int64_t m, std::vector<std::string> after = {},
          OpGroup group = OpGroup::kTp) {
  OpSpec op = MakeOp(id, type, m, IsCollectiveOnly(type) ? 0 : 1024, 1024, std::move(after));
  op.group = group;
  return op;
}

// Every op 1 ms alone over NCCL with its default algorithm, the default factor.
PlanFigures Figures(const JobSpec& spec, double alone_ms = 1.0) {
  const size_t n = spec.ops.size();
  return PlanFigures{std::vector<ops::Schedule>(n), std::vector<double>(n, alone_ms),
                     std::vector<double>(n, 0.0)};
}

// The spec with nothing merged or cut unless a test asks for it.
JobSpec Spec(std::vector<OpSpec> ops) {
  JobSpec spec;
  spec.ops = std::move(ops);
  spec.bucket_mib = 0;
  spec.chunk_kib = 0;
  return spec;
}

std::vector<std::string> Ids(const LayerPlan& plan) {
  std::vector<std::string> ids;
  for (const PlannedOp& op : plan.ops) ids.push_back(op.op.id);
  return ids;
}

const PlannedOp& Find(const LayerPlan& plan, const std::string& id) {
  for (const PlannedOp& op : plan.ops) {
    if (op.op.id == id) return op;
  }
  static const PlannedOp kNone;
  ADD_FAILURE() << "no op " << id;
  return kNone;
}

// On a tp 2 x dp 2 mesh a tp op's ranks are its devices replica after
// replica, a dp op's tp position after tp position; the gradient all-reduce
// goes beside the GEMM after it, the GEMM ops stay on the main streams.
TEST(LayerPlanTest, PlacesEachOpOnItsGroupsDevicesAndStreams) {
  JobSpec spec = Spec({Op("fc1", OpType::kAgGemm, 256), Op("fc2", OpType::kGemmRs, 256, {"fc1"}),
                       Op("grads", OpType::kAllReduce, 256, {"fc1"}, OpGroup::kDp)});
  spec.mesh = Mesh{2, 2};
  absl::StatusOr<LayerPlan> plan = PlanLayerStep(spec, {10, 11, 12, 13}, Figures(spec), true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->order, (std::vector<int>{0, 2, 1}));
  EXPECT_EQ(Ids(*plan), (std::vector<std::string>{"fc1", "grads", "fc2"}));
  EXPECT_EQ(Find(*plan, "fc1").devices, (std::vector<int>{10, 11, 12, 13}));
  EXPECT_EQ(Find(*plan, "grads").devices, (std::vector<int>{10, 12, 11, 13}));
  EXPECT_FALSE(Find(*plan, "fc1").deferred);
  EXPECT_FALSE(Find(*plan, "fc2").deferred);
  EXPECT_TRUE(Find(*plan, "grads").deferred);
  EXPECT_EQ(Find(*plan, "grads").join_before, "");
  EXPECT_EQ(plan->timed_by, 0);
  // Without a second stream per role nothing is deferred.
  plan = PlanLayerStep(spec, {10, 11, 12, 13}, Figures(spec), false);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(Find(*plan, "grads").deferred);
}

// A collective an op waits on goes beside a GEMM op before its waiter and
// joins before it; with no GEMM op between them it stays on the main streams,
// and the step is timed on the first GEMM op, not on it.
TEST(LayerPlanTest, ACriticalCollectiveJoinsBeforeItsWaiter) {
  JobSpec spec =
      Spec({Op("dgrad2", OpType::kAgGemm, 256), Op("x_gather", OpType::kAllGather, 256, {"dgrad2"}),
            Op("wgrad2", OpType::kGemm, 256, {"dgrad2"}),
            Op("wgrad1", OpType::kGemm, 256, {"x_gather"})});
  absl::StatusOr<LayerPlan> plan = PlanLayerStep(spec, {0, 1}, Figures(spec), true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Ids(*plan), (std::vector<std::string>{"dgrad2", "x_gather", "wgrad2", "wgrad1"}));
  EXPECT_TRUE(Find(*plan, "x_gather").deferred);
  EXPECT_EQ(Find(*plan, "x_gather").join_before, "wgrad1");

  spec = Spec({Op("gather", OpType::kAllGather, 256), Op("fc", OpType::kGemm, 256, {"gather"})});
  plan = PlanLayerStep(spec, {0, 1}, Figures(spec), true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(Find(*plan, "gather").deferred);
  EXPECT_EQ(plan->timed_by, 1);
}

// With only collectives there is nothing to run beside: none is deferred.
TEST(LayerPlanTest, NothingIsDeferredWithoutWorkOnTheMainStreams) {
  JobSpec spec = Spec({Op("g1", OpType::kAllReduce, 256), Op("g2", OpType::kAllReduce, 256)});
  absl::StatusOr<LayerPlan> plan = PlanLayerStep(spec, {0, 1}, Figures(spec), true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(Find(*plan, "g1").deferred);
  EXPECT_FALSE(Find(*plan, "g2").deferred);
  EXPECT_TRUE(Deferrals(*plan, spec).empty());
}

// Four 512 KiB gradient all-reduces (bf16) under a 1 MiB bucket: two buckets
// of two, each padded to whole 1024-element rows over the tp 2 ranks and
// fired where its last member stood, with its members' time alone.
TEST(LayerPlanTest, BucketsGradientAllReducesUpToTheBucketSize) {
  JobSpec spec = Spec(
      {Op("wgrad", OpType::kGemm, 256), Op("g1", OpType::kAllReduce, 256, {"wgrad"}),
       Op("g2", OpType::kAllReduce, 256, {"wgrad"}), Op("g3", OpType::kAllReduce, 256, {"wgrad"}),
       Op("g4", OpType::kAllReduce, 256, {"wgrad"}), Op("dgrad", OpType::kGemm, 256, {"wgrad"})});
  spec.bucket_mib = 1;
  absl::StatusOr<LayerPlan> plan = PlanLayerStep(spec, {0, 1}, Figures(spec), true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Ids(*plan),
            (std::vector<std::string>{"wgrad", "bucket(g1+g2)", "bucket(g3+g4)", "dgrad"}));
  const PlannedOp& first = Find(*plan, "bucket(g1+g2)");
  EXPECT_EQ(first.bucketed, (std::vector<std::string>{"g1", "g2"}));
  EXPECT_EQ(first.op.m, 512);
  EXPECT_EQ(first.op.n, 1024);
  EXPECT_DOUBLE_EQ(first.alone_ms, 2.0);
  EXPECT_EQ(first.devices, (std::vector<int>{0, 1}));
  const std::vector<LayerDeferral> deferrals = Deferrals(*plan, spec);
  ASSERT_EQ(deferrals.size(), 2u);
  EXPECT_EQ(deferrals[1].op, "bucket(g3+g4)");
  EXPECT_EQ(deferrals[1].how, "bucketed");
  EXPECT_EQ(deferrals[1].pieces, 1);
}

// With chunking on, all-reduces no larger than a chunk share a bucket and a
// larger one is cut into chunk_kib pieces instead; a hierarchical one stays
// whole (its rows must divide over the mesh).
TEST(LayerPlanTest, ChunksWhatIsLargerThanAChunk) {
  JobSpec spec = Spec(
      {Op("wgrad", OpType::kGemm, 256), Op("small1", OpType::kAllReduce, 32, {"wgrad"}),
       Op("small2", OpType::kAllReduce, 32, {"wgrad"}),
       Op("big", OpType::kAllReduce, 256, {"wgrad"}),
       Op("tree", OpType::kAllReduce, 256, {"wgrad"}), Op("dgrad", OpType::kGemm, 256, {"wgrad"})});
  spec.bucket_mib = 25;
  spec.chunk_kib = 128;
  PlanFigures figures = Figures(spec);
  figures.schedules[4].algorithm = AllReduceAlgorithm::kHierarchical;
  absl::StatusOr<LayerPlan> plan = PlanLayerStep(spec, {0, 1}, figures, true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Ids(*plan),
            (std::vector<std::string>{"wgrad", "bucket(small1+small2)", "big", "tree", "dgrad"}));
  const std::vector<LayerDeferral> deferrals = Deferrals(*plan, spec);
  ASSERT_EQ(deferrals.size(), 3u);
  EXPECT_EQ(deferrals[0].how, "bucketed");
  EXPECT_EQ(deferrals[1].how, "chunked");
  EXPECT_EQ(deferrals[1].pieces, 4);
  EXPECT_EQ(deferrals[1].piece_bytes, 128 << 10);
  EXPECT_EQ(Find(*plan, "big").pieces[3].row, 192);
  EXPECT_EQ(deferrals[2].how, "whole");
  EXPECT_EQ(deferrals[2].pieces, 1);
}

// scheduler: static: a gradient all-reduce joins the main streams before the
// first op that starts defer_bound_ms or more after it was sent, by the ops'
// times alone, or at the end when the step is shorter.
TEST(LayerPlanTest, ADeferralJoinsWithinItsBound) {
  JobSpec spec =
      Spec({Op("fc1", OpType::kGemm, 256), Op("grads", OpType::kAllReduce, 256, {"fc1"}),
            Op("fc2", OpType::kGemm, 256, {"fc1"}), Op("fc3", OpType::kGemm, 256, {"fc2"}),
            Op("fc4", OpType::kGemm, 256, {"fc3"})});
  spec.defer_bound_ms = 1.5;
  absl::StatusOr<LayerPlan> plan = PlanLayerStep(spec, {0, 1}, Figures(spec), true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Ids(*plan), (std::vector<std::string>{"fc1", "grads", "fc2", "fc3", "fc4"}));
  EXPECT_EQ(Find(*plan, "grads").join_before, "fc4");
  EXPECT_FALSE(Find(*plan, "grads").on_deferred_lane);
  ASSERT_EQ(Deferrals(*plan, spec).size(), 1u);
  EXPECT_EQ(Deferrals(*plan, spec)[0].joined_before, "fc4");
  spec.defer_bound_ms = 50;
  plan = PlanLayerStep(spec, {0, 1}, Figures(spec), true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Find(*plan, "grads").join_before, "");
}

// scheduler: dynamic: the gradient all-reduce goes to the deferred lane, the
// gather an op waits on stays critical on the side streams; with chunk_kib 0
// a chunk is at least 256 KiB and at least 0.2 ms by its time alone.
TEST(LayerPlanTest, DynamicSendsWhatNothingWaitsOnToTheDeferredLane) {
  JobSpec spec =
      Spec({Op("dgrad2", OpType::kAgGemm, 256), Op("x_gather", OpType::kAllGather, 256, {"dgrad2"}),
            Op("wgrad2", OpType::kGemm, 256, {"dgrad2"}),
            Op("grads", OpType::kAllReduce, 1024, {"wgrad2"}),
            Op("wgrad1", OpType::kGemm, 256, {"x_gather"})});
  spec.scheduler = Scheduler::kDynamic;
  PlanFigures figures = Figures(spec);
  figures.alone_ms[3] = 0.4;  // 2 MiB: at most 2 chunks of 0.2 ms
  absl::StatusOr<LayerPlan> plan = PlanLayerStep(spec, {0, 1}, figures, true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(Find(*plan, "x_gather").deferred);
  EXPECT_FALSE(Find(*plan, "x_gather").on_deferred_lane);
  EXPECT_TRUE(Find(*plan, "grads").on_deferred_lane);
  EXPECT_EQ(Pieces(Find(*plan, "grads")), 2);
  EXPECT_TRUE(plan->notes.empty());
  figures.alone_ms[3] = 10;  // 50 chunks of 0.2 ms would be below 256 KiB
  plan = PlanLayerStep(spec, {0, 1}, figures, true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Pieces(Find(*plan, "grads")), 8);
  EXPECT_TRUE(Deferrals(*plan, spec)[1].dispatched);
}

// A bound one chunk cannot keep (1.5 x 0.4 ms / 2 = 0.3 ms a chunk) is said,
// and an all-reduce that is not cut is said to go whole.
TEST(LayerPlanTest, DynamicSaysWhatTheBoundCannotHold) {
  JobSpec spec =
      Spec({Op("fc1", OpType::kGemm, 256), Op("grads", OpType::kAllReduce, 1024, {"fc1"}),
            Op("small", OpType::kAllReduce, 32, {"fc1"}), Op("fc2", OpType::kGemm, 256, {"fc1"})});
  spec.scheduler = Scheduler::kDynamic;
  spec.defer_bound_ms = 0.25;
  PlanFigures figures = Figures(spec, 0.4);
  absl::StatusOr<LayerPlan> plan = PlanLayerStep(spec, {0, 1}, figures, true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->notes.size(), 3u);
  EXPECT_EQ(plan->notes[0],
            "grads: defer_bound_ms 0.25 is below one chunk's expected time (0.3 ms): its chunks "
            "go as soon as its input is ready, critical work or not");
  EXPECT_NE(plan->notes[1].find("small: no larger than a chunk (256 KiB, or 0.2 ms alone)"),
            std::string::npos)
      << plan->notes[1];
  EXPECT_NE(plan->notes[2].find("small: defer_bound_ms 0.25 is below one chunk's expected time "
                                "(0.6 ms)"),
            std::string::npos)
      << plan->notes[2];
}

// Figures that do not cover every op, and a graph without a topological
// order, are refused.
TEST(LayerPlanTest, RefusesFiguresOrGraphsItCannotPlan) {
  JobSpec spec = Spec({Op("fc1", OpType::kGemm, 256), Op("fc2", OpType::kGemm, 256, {"fc1"})});
  PlanFigures figures = Figures(spec);
  figures.alone_ms.pop_back();
  absl::StatusOr<LayerPlan> plan = PlanLayerStep(spec, {0, 1}, figures, true);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  spec.ops[0].after = {"fc2"};
  plan = PlanLayerStep(spec, {0, 1}, Figures(spec), true);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << plan.status();
}

}  // namespace
}  // namespace overlap::runner
