// Which collectives a layer step defers: the one definition the runtime's
// layer step and the planner's layer estimate share.
#include "common/deferred_collectives.h"

#include <string>
#include <vector>

#include "common/graph_parser.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

std::vector<std::string> Deferred(const std::string& yaml) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(yaml);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return {};
  const std::vector<bool> deferred = DeferredCollectives(*spec);
  EXPECT_EQ(deferred.size(), spec->ops.size());
  std::vector<std::string> ids;
  for (size_t i = 0; i < deferred.size(); ++i) {
    if (deferred[i]) ids.push_back(spec->ops[i].id);
  }
  return ids;
}

// Nothing waits on a gradient all-reduce, over the tp group as over dp; a
// collective an op waits on is critical; a GEMM is never deferred; a
// collective only a deferred one reads is deferred too.
TEST(DeferredCollectivesTest, ThoseNoOpWaitsOnOverAnyGroup) {
  EXPECT_THAT(Deferred(R"(ops:
  - {id: dgrad, type: ag_gemm, m: 64, k: 64, n: 64}
  - {id: x_gather, type: all_gather, m: 64, n: 64, after: [dgrad]}
  - {id: wgrad, type: gemm, m: 64, k: 64, n: 64, after: [x_gather]}
  - {id: grads, type: all_reduce, m: 64, n: 64, input: wgrad}
  - {id: loss, type: all_reduce, m: 8, n: 8, after: [wgrad]}
  - {id: next, type: gemm, m: 64, k: 64, n: 64, after: [loss]}
  - {id: again, type: all_reduce, m: 64, n: 64, input: grads}
  - {id: last, type: gemm, m: 64, k: 64, n: 64, after: [next]}
)"),
              ::testing::ElementsAre("grads", "again"));
  EXPECT_THAT(Deferred(R"(mesh: {tp: 1, dp: 2}
ops:
  - {id: wgrad, type: gemm, m: 64, k: 64, n: 64}
  - {id: grads, type: all_reduce, m: 64, n: 64, group: dp, after: [wgrad]}
  - {id: rs, type: reduce_scatter, m: 64, n: 64, after: [wgrad]}
)"),
              ::testing::ElementsAre("grads", "rs"));
}

}  // namespace
}  // namespace overlap
