// Seeded random ops (tests/random_op_util.h) on the host backend, with the
// hazard checker on, at tp 1 to 4. layer_ops_test walks the schedules on one
// shape per tp; this walks the shapes. Each op must pass the graph validator,
// run, and match the float64 reference twice.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/graph_validator.h"
#include "server/ops/layer_ops.h"
#include "server/ops/reference.h"
#include "tests/host_engine_util.h"
#include "tests/random_op_util.h"

namespace overlap::ops {
namespace {

TEST(RandomShapesTest, EveryDrawnOpMatchesFloat64) {
  std::mt19937 rng(20261201);
  auto engine = CheckedHostEngine(4);

  for (int i = 0; i < 200; ++i) {
    const int tp = RandomInt(rng, 1, 4);
    const OpSpec op = RandomOp(rng, tp, {OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr});
    const Schedule schedule = ScheduleOf(op);
    SCOPED_TRACE(absl::StrCat("case ", i, ": ", DescribeOp(op), " at tp ", tp));
    std::vector<int> devices;
    for (int d = 0; d < tp; ++d) devices.push_back(d);

    JobSpec spec;
    spec.name = "random";
    spec.ops = {op};
    spec.devices = devices;
    spec.dtype = DType::kF32;
    ValidationLimits limits;
    limits.device_count = 4;
    ASSERT_TRUE(ValidateJobSpec(spec, limits).ok()) << ValidateJobSpec(spec, limits).status();

    auto ctx = OpContext::Create(*engine, op, DType::kF32, devices, BuffersFor(op, tp, schedule));
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ASSERT_TRUE(FillInputs(**ctx, 11, i).ok());
    ASSERT_TRUE(engine->Synchronize(devices).ok());
    for (int iteration = 0; iteration < 2; ++iteration) {
      ASSERT_TRUE(PoisonOutputs(**ctx).ok());
      const absl::Status enqueued = EnqueueOp(**ctx, schedule);
      ASSERT_TRUE(enqueued.ok()) << enqueued;
      const absl::Status ran = engine->Synchronize(devices);
      ASSERT_TRUE(ran.ok()) << ran;
      auto v = VerifyOutputs(**ctx, 11, i, /*max_rows=*/1000);
      ASSERT_TRUE(v.ok()) << v.status();
      EXPECT_EQ(v->rows_checked, ctx->get()->shapes().y_rows);
      EXPECT_LT(v->max_rel_error, 1e-5);
    }
  }
}

}  // namespace
}  // namespace overlap::ops
