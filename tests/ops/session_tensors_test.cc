// A session's tensors (OpContext::UseTensors): ag_gemm and gemm_rs at tp 2 on
// the host backend whose X, W and Y are another process's memory (memfds
// imported with SharedMemory::ImportBuffer), inputs written through the
// client's own mapping, outputs checked there and against the float64
// reference; the context never frees what it did not allocate.
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/dtype.h"
#include "common/unix_frames.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/host/host_engine.h"
#include "server/ops/layer_ops.h"
#include "server/ops/op_context.h"
#include "server/ops/reference.h"

namespace overlap::ops {
namespace {

using engine::BufferId;
using engine::BufferRef;

constexpr int kTp = 2;
constexpr uint64_t kJobSeed = 11;
constexpr DType kDType = DType::kBF16;

// One rank's tensors in one memfd, as a client lays them out: A, W and Y one
// after the other at 64-byte (not page) boundaries.
struct ClientTensors {
  OwnedFd fd;
  uint8_t* data = nullptr;
  size_t bytes = 0;
  size_t offset[3] = {0, 0, 0};  // A, W, Y
  size_t size[3] = {0, 0, 0};
  BufferId ids[3] = {engine::kNoBuffer, engine::kNoBuffer, engine::kNoBuffer};
  ~ClientTensors() {
    if (data != nullptr) munmap(data, bytes);
  }
};

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

class SessionTensorsTest : public ::testing::TestWithParam<std::tuple<OpType, OverlapMode>> {
 protected:
  void SetUp() override {
    engine::HostEngineOptions options;
    options.device_count = kTp;
    options.device_memory_bytes = 64 << 20;
    options.hazard_checks = true;
    auto engine = engine::CreateHostEngine(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(engine).value();
    ASSERT_NE(engine_->Shared(), nullptr);
  }

  // Maps rank r's tensors for `op` and imports them on device r.
  void MakeClientTensors(const OpSpec& op, int r, ClientTensors* t) {
    const LocalShapes sh = LocalShapesFor(op, kTp);
    const BufferDTypes dt = BufferDTypesFor(op.type, kDType);
    t->size[0] = static_cast<size_t>(sh.a_rows * sh.a_cols) * DTypeSize(dt.a);
    t->size[1] = static_cast<size_t>(sh.w_rows * sh.w_cols) * DTypeSize(dt.w);
    t->size[2] = static_cast<size_t>(sh.y_rows * sh.y_cols) * DTypeSize(dt.y);
    size_t end = 0;
    for (int i = 0; i < 3; ++i) {
      t->offset[i] = end;
      end = RoundUp(end + t->size[i], 64);
    }
    t->bytes = end;
    t->fd = OwnedFd(memfd_create(("session_rank" + std::to_string(r)).c_str(), MFD_CLOEXEC));
    ASSERT_TRUE(t->fd.valid());
    ASSERT_EQ(ftruncate(t->fd.get(), static_cast<off_t>(t->bytes)), 0);
    void* p = mmap(nullptr, t->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, t->fd.get(), 0);
    ASSERT_NE(p, MAP_FAILED);
    t->data = static_cast<uint8_t*>(p);
    for (int i = 0; i < 3; ++i) {
      auto id = engine_->Shared()->ImportBuffer(r, t->fd.get(), t->offset[i], t->size[i]);
      ASSERT_TRUE(id.ok()) << id.status();
      t->ids[i] = *id;
    }
  }

  // The inputs the reference expects (reference.h, FillInputs), written by
  // the client into its own memory.
  void WriteInputs(const OpSpec& op, int r, ClientTensors* t) {
    const LocalShapes sh = LocalShapesFor(op, kTp);
    const BufferDTypes dt = BufferDTypesFor(op.type, kDType);
    const InputScaling scaling = InputScalingFor(op, kDType);
    const InputKeys keys = InputKeysOf(op);
    const uint64_t seeds[2] = {InputSeed(kJobSeed, keys.a, 0, r),
                               InputSeed(kJobSeed, keys.w, 1, r)};
    const int64_t counts[2] = {sh.a_rows * sh.a_cols, sh.w_rows * sh.w_cols};
    const DType dtypes[2] = {dt.a, dt.w};
    const float fills[2] = {scaling.fill_a, scaling.fill_w};
    for (int i = 0; i < 2; ++i) {
      for (int64_t e = 0; e < counts[i]; ++e) {
        const double value = InputValue(dtypes[i], seeds[i], static_cast<uint64_t>(e), fills[i]);
        StoreFromFloat(t->data + t->offset[i], dtypes[i], static_cast<size_t>(e),
                       static_cast<float>(value));
      }
    }
  }

  std::unique_ptr<engine::Engine> engine_;
};

OpSpec SmallOp(OpType type) {
  OpSpec op;
  op.id = "session_op";
  op.type = type;
  op.m = 16 * kTp;
  op.k = 24 * kTp;
  op.n = 8 * kTp;
  return op;
}

TEST_P(SessionTensorsTest, RunsOnTheClientsMemory) {
  const auto [type, mode] = GetParam();
  const OpSpec op = SmallOp(type);
  const Schedule schedule{mode, mode == OverlapMode::kSerial ? 1 : 2, Transport::kP2p};
  BufferSizes sizes = BuffersFor(op, kTp, schedule);
  sizes.a = sizes.w = sizes.y = 0;  // the client's
  ClientTensors tensors[kTp];
  for (int r = 0; r < kTp; ++r) {
    MakeClientTensors(op, r, &tensors[r]);
    WriteInputs(op, r, &tensors[r]);
  }
  {
    auto ctx = OpContext::Create(*engine_, op, kDType, {0, 1}, sizes);
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    for (int r = 0; r < kTp; ++r) {
      EXPECT_EQ((*ctx)->rank(r).a, engine::kNoBuffer);  // zero sizes: nothing allocated
      const BufferId* ids = tensors[r].ids;
      ASSERT_TRUE((*ctx)->UseTensors(r, ids[0], ids[1], ids[2]).ok());
      EXPECT_EQ((*ctx)->DTypeOf(ids[2]), BufferDTypesFor(type, kDType).y);
    }
    // Twice: the second iteration must not build on the first.
    for (int iteration = 0; iteration < 2; ++iteration) {
      ASSERT_TRUE(PoisonOutputs(**ctx).ok());
      ASSERT_TRUE(EnqueueOp(**ctx, schedule).ok());
      ASSERT_TRUE(engine_->Synchronize({0, 1}).ok());
      auto v = VerifyOutputs(**ctx, kJobSeed, InputKeysOf(op), /*max_rows=*/1000);
      ASSERT_TRUE(v.ok()) << v.status();
      EXPECT_EQ(v->rows_checked, (*ctx)->shapes().y_rows);
      EXPECT_LT(v->max_rel_error, OutputTolerance(type, kDType, kTp));
    }
  }
  // The context is gone; the client's buffers are not, and hold Y.
  for (int r = 0; r < kTp; ++r) {
    const ClientTensors& t = tensors[r];
    std::vector<uint8_t> y(t.size[2]);
    ASSERT_TRUE(engine_->CopyToHost(y.data(), BufferRef{t.ids[2], 0, y.size()}, r).ok());
    EXPECT_EQ(std::memcmp(y.data(), t.data + t.offset[2], y.size()), 0);
    const DType y_dtype = BufferDTypesFor(type, kDType).y;
    for (size_t e = 0; e < y.size() / DTypeSize(y_dtype); ++e) {
      ASSERT_TRUE(std::isfinite(LoadAsFloat(t.data + t.offset[2], y_dtype, e))) << e;
    }
    for (BufferId id : t.ids) engine_->Free(id);
  }
  EXPECT_EQ(engine_->Monitor()->MemoryInUse(0), 0);  // the context freed its own
}

INSTANTIATE_TEST_SUITE_P(Ops, SessionTensorsTest,
                         ::testing::Combine(::testing::Values(OpType::kAgGemm, OpType::kGemmRs),
                                            ::testing::Values(OverlapMode::kSerial,
                                                              OverlapMode::kRing)),
                         [](const auto& info) {
                           return OpTypeName(std::get<0>(info.param)) + "_" +
                                  OverlapModeName(std::get<1>(info.param));
                         });

TEST_F(SessionTensorsTest, UseTensorsChecksItsArguments) {
  const OpSpec op = SmallOp(OpType::kAgGemm);
  const Schedule schedule{OverlapMode::kSerial, 1, Transport::kNccl};
  auto ctx = OpContext::Create(*engine_, op, kDType, {0, 1}, BuffersFor(op, kTp, schedule));
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  const BufferId own_a = (*ctx)->rank(0).a;
  ASSERT_NE(own_a, engine::kNoBuffer);
  EXPECT_EQ((*ctx)->UseTensors(2, engine::kNoBuffer, engine::kNoBuffer, engine::kNoBuffer).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*ctx)->UseTensors(-1, engine::kNoBuffer, engine::kNoBuffer, engine::kNoBuffer).code(),
            absl::StatusCode::kInvalidArgument);
  auto client = engine_->Allocate(0, 4096);
  ASSERT_TRUE(client.ok());
  // bf16 A, and Y of the same dtype here: one buffer may stand for both...
  // but not for tensors of different dtypes (an fp8 op's A and Y).
  auto fp8 = OpContext::Create(*engine_, op, DType::kFP8, {0, 1}, BuffersFor(op, kTp, schedule));
  ASSERT_TRUE(fp8.ok()) << fp8.status();
  EXPECT_EQ((*fp8)->UseTensors(0, *client, engine::kNoBuffer, *client).code(),
            absl::StatusCode::kInvalidArgument);
  // kNoBuffer keeps the context's own.
  ASSERT_TRUE((*ctx)->UseTensors(0, engine::kNoBuffer, *client, engine::kNoBuffer).ok());
  EXPECT_EQ((*ctx)->rank(0).a, own_a);
  EXPECT_EQ((*ctx)->rank(0).w, *client);
  fp8->reset();
  ctx->reset();
  // The caller's buffer outlives the context.
  std::vector<uint8_t> bytes(4096);
  EXPECT_TRUE(engine_->CopyToHost(bytes.data(), BufferRef{*client, 0, 4096}, 0).ok());
  engine_->Free(*client);
  EXPECT_EQ(engine_->Monitor()->MemoryInUse(0), 0);
}

}  // namespace
}  // namespace overlap::ops
