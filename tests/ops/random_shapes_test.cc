// Seeded random ops on the host backend, with the hazard checker on: shapes
// that are no multiple of anything (a rank may hold a single row; up to 9
// chunks, never more than its rows), every mode and transport, tp 1 to 4. layer_ops_test
// walks the schedules on one shape per tp; this walks the shapes. Each op must
// pass the graph validator, run, and match the float64 reference twice.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/graph_validator.h"
#include "server/engine/host/host_engine.h"
#include "server/ops/layer_ops.h"
#include "server/ops/reference.h"

namespace overlap::ops {
namespace {

struct RandomCase {
  OpSpec op;
  Schedule schedule;
  int tp = 1;
};

RandomCase Draw(std::mt19937& rng) {
  auto pick = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  RandomCase c;
  c.tp = pick(1, 4);
  const OpType types[] = {OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr};
  c.op.id = "op";
  c.op.type = types[pick(0, 2)];
  const int rows_per_rank = pick(1, 40);
  c.op.m = int64_t{rows_per_rank} * c.tp;
  // The dimension that is split over the ranks must divide; the other need not.
  c.op.k = c.op.type == OpType::kAgGemm ? pick(1, 48) : int64_t{pick(1, 24)} * c.tp;
  c.op.n = c.op.type == OpType::kAgGemm ? int64_t{pick(1, 16)} * c.tp : pick(1, 40);

  if (c.tp == 1) {
    c.schedule = Schedule{OverlapMode::kSerial, 1, Transport::kNccl};
    return c;
  }
  const OverlapMode modes[] = {OverlapMode::kSerial, OverlapMode::kBulk, OverlapMode::kChunked,
                               OverlapMode::kRing};
  c.schedule.mode = modes[pick(0, 3)];
  const bool pieces =
      c.schedule.mode == OverlapMode::kChunked || c.schedule.mode == OverlapMode::kRing;
  c.schedule.chunks = pieces ? pick(1, std::min(rows_per_rank, 9)) : 1;
  // Direct stores exist only in the reduction rings.
  const bool direct_ok = c.schedule.mode == OverlapMode::kRing && c.op.type != OpType::kAgGemm;
  const int transport = pick(0, direct_ok ? 2 : 1);
  c.schedule.transport = transport == 0   ? Transport::kNccl
                         : transport == 1 ? Transport::kP2p
                                          : Transport::kDirect;
  c.op.mode = c.schedule.mode;
  c.op.chunks = pieces ? c.schedule.chunks : 0;
  c.op.transport = c.schedule.transport;
  return c;
}

std::string Describe(const RandomCase& c) {
  return absl::StrCat(OpTypeName(c.op.type), " ", c.op.m, "x", c.op.k, "x", c.op.n, " tp ", c.tp,
                      " ", c.schedule.Name());
}

TEST(RandomShapesTest, EveryDrawnOpMatchesFloat64) {
  std::mt19937 rng(20261201);
  engine::HostEngineOptions options;
  options.device_count = 4;
  options.device_memory_bytes = 64 << 20;
  options.hazard_checks = true;
  auto engine = engine::CreateHostEngine(options);
  ASSERT_TRUE(engine.ok()) << engine.status();

  for (int i = 0; i < 200; ++i) {
    const RandomCase c = Draw(rng);
    SCOPED_TRACE(absl::StrCat("case ", i, ": ", Describe(c)));
    std::vector<int> devices;
    for (int d = 0; d < c.tp; ++d) devices.push_back(d);

    JobSpec spec;
    spec.name = "random";
    spec.ops = {c.op};
    spec.devices = devices;
    spec.dtype = DType::kF32;
    ValidationLimits limits;
    limits.device_count = 4;
    ASSERT_TRUE(ValidateJobSpec(spec, limits).ok()) << ValidateJobSpec(spec, limits).status();

    auto ctx =
        OpContext::Create(**engine, c.op, DType::kF32, devices, BuffersFor(c.op, c.tp, c.schedule));
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ASSERT_TRUE(FillInputs(**ctx, 11, i).ok());
    ASSERT_TRUE((*engine)->Synchronize(devices).ok());
    for (int iteration = 0; iteration < 2; ++iteration) {
      ASSERT_TRUE(PoisonOutputs(**ctx).ok());
      const absl::Status enqueued = EnqueueOp(**ctx, c.schedule);
      ASSERT_TRUE(enqueued.ok()) << enqueued;
      const absl::Status ran = (*engine)->Synchronize(devices);
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
