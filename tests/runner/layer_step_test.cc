// The layer step's order: critical-path collectives first, collectives that
// nothing waits on never holding one that something waits on up, GEMM ops in
// file order, and every dependency kept.
#include "server/runner/layer_step.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/op_spec_util.h"

namespace overlap::runner {
namespace {

OpSpec Op(const std::string& id, OpType type, std::vector<std::string> after = {}) {
  return MakeOp(id, type, 64, IsCollectiveOnly(type) ? 0 : 64, 64, std::move(after));
}

// The ids in LayerOrder's order; empty when it failed.
std::vector<std::string> Ids(const JobSpec& spec, const absl::StatusOr<std::vector<int>>& order) {
  std::vector<std::string> ids;
  if (!order.ok()) return ids;
  for (int i : *order) ids.push_back(spec.ops[i].id);
  return ids;
}

// Written in an order that would leave the gather with nothing beside it (its
// waiter right after it) and the gradient all-reduce ahead of it on the side
// stream: the layer order sends the gather as soon as it is ready.
TEST(LayerOrderTest, CriticalCollectiveGoesAsSoonAsItIsReady) {
  JobSpec spec;
  spec.ops = {Op("dgrad2", OpType::kAgGemm),
              Op("wgrad2", OpType::kGemm, {"dgrad2"}),
              Op("grads", OpType::kAllReduce, {"wgrad2"}),
              Op("dgrad1", OpType::kGemmRs, {"dgrad2"}),
              Op("x_gather", OpType::kAllGather, {"dgrad2"}),
              Op("wgrad1", OpType::kGemm, {"dgrad1", "x_gather"})};
  EXPECT_EQ(Ids(spec, LayerOrder(spec)), (std::vector<std::string>{"dgrad2", "x_gather", "wgrad2",
                                                                   "grads", "dgrad1", "wgrad1"}));
}

// A collective that nothing waits on waits for the last one that something
// does, even when it is ready first, but not for the GEMM ops after that.
TEST(LayerOrderTest, NonCriticalCollectiveWaitsForTheCriticalOnes) {
  JobSpec spec;
  spec.ops = {Op("fc1", OpType::kAgGemm),          Op("grads", OpType::kAllReduce, {"fc1"}),
              Op("fc2", OpType::kGemmRs, {"fc1"}), Op("gather", OpType::kAllGather, {"fc2"}),
              Op("fc3", OpType::kGemm, {"fc2"}),   Op("fc4", OpType::kGemm, {"fc3", "gather"}),
              Op("fc5", OpType::kGemm, {"fc4"})};
  EXPECT_EQ(Ids(spec, LayerOrder(spec)),
            (std::vector<std::string>{"fc1", "fc2", "gather", "grads", "fc3", "fc4", "fc5"}));
}

// Without collectives alone, the layer order is the file's topological order.
TEST(LayerOrderTest, KeepsFileOrderWithoutCollectivesAlone) {
  JobSpec spec;
  spec.ops = {Op("out", OpType::kGemmAr, {"fc2"}), Op("fc1", OpType::kAgGemm),
              Op("fc2", OpType::kGemmRs, {"fc1"}), Op("side", OpType::kGemm)};
  EXPECT_EQ(Ids(spec, LayerOrder(spec)), (std::vector<std::string>{"fc1", "fc2", "out", "side"}));
}

// A gradient all-reduce written after fc2 but ready after fc1 goes right
// after fc1, so that it runs beside fc2; in the file's order it would start
// only once fc2 had finished, with nothing left to run beside.
TEST(LayerOrderTest, GradientAllReduceGoesBesideTheOpsAfterIt) {
  JobSpec spec;
  spec.ops = {Op("fc1", OpType::kAgGemm), Op("fc2", OpType::kGemmRs, {"fc1"}),
              Op("grads", OpType::kAllReduce, {"fc1"})};
  EXPECT_EQ(Ids(spec, LayerOrder(spec)), (std::vector<std::string>{"fc1", "grads", "fc2"}));
}

// A collective that only other collectives wait on is still critical, and a
// chain of them keeps its order.
TEST(LayerOrderTest, ChainsOfCollectivesKeepTheirDependencies) {
  JobSpec spec;
  spec.ops = {Op("g0", OpType::kAllReduce), Op("fc1", OpType::kAgGemm),
              Op("b", OpType::kAllReduce, {"a"}), Op("a", OpType::kAllGather, {"fc1"}),
              Op("fc2", OpType::kGemm, {"fc1"})};
  EXPECT_EQ(Ids(spec, LayerOrder(spec)), (std::vector<std::string>{"fc1", "a", "g0", "b", "fc2"}));
}

// Two layers' backward: layer 1's gradient all-reduce is ready before layer
// 0's gather. Given each op's time alone, it goes at once when it would be off
// the side stream (at 1.5x its time alone) before the gather could go (once
// l0_dgrad ran), and waits for the gather when it would not; without times it
// always waits.
TEST(LayerOrderTest, NonCriticalCollectiveGoesFirstWhenItFitsBeforeTheNextCriticalOne) {
  JobSpec spec;
  spec.ops = {Op("l1_dgrad", OpType::kGemm),
              Op("l1_wgrad", OpType::kGemm, {"l1_dgrad"}),
              Op("l1_grads", OpType::kAllReduce, {"l1_wgrad"}),
              Op("l0_dgrad", OpType::kAgGemm, {"l1_dgrad"}),
              Op("l0_gather", OpType::kAllGather, {"l0_dgrad"}),
              Op("l0_wgrad", OpType::kGemm, {"l0_dgrad", "l0_gather"})};
  const std::vector<std::string> early = {"l1_dgrad", "l1_wgrad",  "l1_grads",
                                          "l0_dgrad", "l0_gather", "l0_wgrad"};
  const std::vector<std::string> waits = {"l1_dgrad",  "l1_wgrad", "l0_dgrad",
                                          "l0_gather", "l1_grads", "l0_wgrad"};
  // Sent when the main streams reach 2.0 ms, off by 2.0 + 1.5 x 0.4 = 2.6; the
  // gather can go at 2.0 + 1.0 (l0_dgrad) = 3.0.
  EXPECT_EQ(Ids(spec, LayerOrder(spec, {1.0, 1.0, 0.4, 1.0, 0.2, 1.0})), early);
  // 2.0 + 1.5 x 0.8 = 3.2: past 3.0.
  EXPECT_EQ(Ids(spec, LayerOrder(spec, {1.0, 1.0, 0.8, 1.0, 0.2, 1.0})), waits);
  EXPECT_EQ(Ids(spec, LayerOrder(spec)), waits);
  // Times for some ops only are no times.
  EXPECT_EQ(Ids(spec, LayerOrder(spec, {1.0, 1.0})), waits);
}

// Collectives sent one after another queue on the side stream: each is judged
// by when the ones before it will be done.
TEST(LayerOrderTest, TheSideStreamsQueueCounts) {
  JobSpec spec;
  spec.ops = {Op("wgrad", OpType::kGemm),
              Op("g1", OpType::kAllReduce, {"wgrad"}),
              Op("g2", OpType::kAllReduce, {"wgrad"}),
              Op("g3", OpType::kAllReduce, {"wgrad"}),
              Op("dgrad", OpType::kAgGemm, {"wgrad"}),
              Op("gather", OpType::kAllGather, {"dgrad"}),
              Op("last", OpType::kGemm, {"gather"})};
  // From 1.0: g1 off at 1.45, g2 at 1.9, g3 would be at 2.35, past the
  // gather's 1.0 + 1.0 (dgrad) = 2.0.
  EXPECT_EQ(Ids(spec, LayerOrder(spec, {1.0, 0.3, 0.3, 0.3, 1.0, 0.1, 1.0})),
            (std::vector<std::string>{"wgrad", "g1", "g2", "dgrad", "gather", "g3", "last"}));
}

}  // namespace
}  // namespace overlap::runner
