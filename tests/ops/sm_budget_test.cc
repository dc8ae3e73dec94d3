// Which GEMMs and collectives the schedules mark as running beside each other
// (engine.h, CollectiveSmBudget): the CUDA backend caps the marked collectives'
// CTAs and has the marked GEMMs leave those SMs free, so a wrong mark either
// starves an NCCL kernel behind a GEMM or takes SMs from a GEMM that runs alone.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/engine/host/host_engine.h"
#include "server/ops/layer_ops.h"
#include "server/ops/reference.h"
#include "tests/forwarding_engine.h"

namespace overlap::ops {
namespace {

using engine::BufferId;
using engine::BufferRef;
using engine::EventId;
using engine::StreamId;

// Forwards every call to a host engine and records the marks.
class MarkRecorder final : public ForwardingEngine {
 public:
  explicit MarkRecorder(std::unique_ptr<engine::Engine> inner)
      : ForwardingEngine(std::move(inner)) {}

  struct Marks {
    int gemms = 0, gemms_beside = 0;
    int collectives = 0, collectives_beside = 0;
  };
  Marks marks;

  int CollectiveSmBudget() const override { return 8; }
  absl::Status Gemm(StreamId s, const engine::GemmArgs& args) override {
    ++marks.gemms;
    marks.gemms_beside += args.beside_collective ? 1 : 0;
    return inner().Gemm(s, args);
  }
  absl::Status AllGather(const engine::CollectiveArgs& args) override {
    Count(args.beside_gemm);
    return inner().AllGather(args);
  }
  absl::Status ReduceScatter(const engine::CollectiveArgs& args) override {
    Count(args.beside_gemm);
    return inner().ReduceScatter(args);
  }
  absl::Status AllReduce(const engine::CollectiveArgs& args) override {
    Count(args.beside_gemm);
    return inner().AllReduce(args);
  }
  absl::Status SendRecv(int channel, const std::vector<int>& group,
                        const std::vector<engine::Transfer>& transfers,
                        bool beside_gemm) override {
    Count(beside_gemm);
    return inner().SendRecv(channel, group, transfers, beside_gemm);
  }

 private:
  void Count(bool beside) {
    ++marks.collectives;
    marks.collectives_beside += beside ? 1 : 0;
  }
};

class SmBudgetTest : public ::testing::TestWithParam<OpType> {
 protected:
  void SetUp() override {
    engine::HostEngineOptions options;
    options.device_count = 2;
    options.device_memory_bytes = 16 << 20;
    options.hazard_checks = true;
    auto host = engine::CreateHostEngine(options);
    ASSERT_TRUE(host.ok()) << host.status();
    recorder_ = std::make_unique<MarkRecorder>(std::move(host).value());
    op_.id = "op";
    op_.type = GetParam();
    op_.m = 32;
    op_.k = 48;
    op_.n = 16;
    BufferSizes sizes;
    for (const Schedule& s : AllSchedules()) sizes = MaxSizes(sizes, BuffersFor(op_, 2, s));
    auto ctx = OpContext::Create(*recorder_, op_, DType::kF32, {0, 1}, sizes);
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ctx_ = std::move(ctx).value();
    ASSERT_TRUE(FillInputs(*ctx_, 3, 0).ok());
  }

  static std::vector<Schedule> AllSchedules() {
    std::vector<Schedule> all;
    for (Transport t : {Transport::kNccl, Transport::kP2p}) {
      all.push_back({OverlapMode::kSerial, 1, t});
      all.push_back({OverlapMode::kBulk, 1, t});
      all.push_back({OverlapMode::kChunked, 2, t});
      all.push_back({OverlapMode::kRing, 2, t});
    }
    return all;
  }

  // The marks of one run of `enqueue`, which must succeed.
  template <typename Fn>
  MarkRecorder::Marks Run(Fn&& enqueue) {
    recorder_->marks = {};
    const absl::Status status = enqueue();
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_TRUE(recorder_->Synchronize({0, 1}).ok());
    return recorder_->marks;
  }

  std::unique_ptr<MarkRecorder> recorder_;
  OpSpec op_;
  std::unique_ptr<OpContext> ctx_;
};

TEST_P(SmBudgetTest, OverlappedNcclSchedulesMarkEveryGemmAndCollective) {
  for (const Schedule& s : AllSchedules()) {
    if (s.mode == OverlapMode::kSerial || s.transport != Transport::kNccl) continue;
    const MarkRecorder::Marks m = Run([&] { return EnqueueOp(*ctx_, s); });
    EXPECT_GT(m.gemms, 0) << s.Name();
    EXPECT_EQ(m.gemms_beside, m.gemms) << s.Name();
    EXPECT_GT(m.collectives, 0) << s.Name();
    EXPECT_EQ(m.collectives_beside, m.collectives) << s.Name();
  }
}

TEST_P(SmBudgetTest, SerialAndCopyEngineSchedulesMarkNothing) {
  for (const Schedule& s : AllSchedules()) {
    if (s.mode != OverlapMode::kSerial && s.transport == Transport::kNccl) continue;
    const MarkRecorder::Marks m = Run([&] { return EnqueueOp(*ctx_, s); });
    EXPECT_GT(m.gemms, 0) << s.Name();
    EXPECT_EQ(m.gemms_beside, 0) << s.Name();
    EXPECT_EQ(m.collectives_beside, 0) << s.Name();
    if (s.transport == Transport::kNccl) {
      EXPECT_GT(m.collectives, 0) << s.Name();
    }
  }
}

TEST_P(SmBudgetTest, BaselinesMarkOnlyTheGemmBesideTheCollective) {
  const MarkRecorder::Marks alone = Run([&] { return EnqueueGemmAlone(*ctx_); });
  EXPECT_EQ(alone.gemms, 2);
  EXPECT_EQ(alone.gemms_beside, 0);
  const MarkRecorder::Marks comm = Run([&] { return EnqueueCommAlone(*ctx_, Transport::kNccl); });
  EXPECT_EQ(comm.collectives, 1);
  EXPECT_EQ(comm.collectives_beside, 0);
  const MarkRecorder::Marks beside =
      Run([&] { return EnqueueGemmBesideComm(*ctx_, Transport::kNccl, EventKind::kGemmEnd); });
  EXPECT_EQ(beside.gemms_beside, 2);
  EXPECT_EQ(beside.collectives_beside, 1);
  const MarkRecorder::Marks copies =
      Run([&] { return EnqueueGemmBesideComm(*ctx_, Transport::kP2p, EventKind::kGemmEnd); });
  EXPECT_EQ(copies.gemms_beside, 0);
  // After an overlapped schedule, the next one starts unmarked.
  Run([&] { return EnqueueOp(*ctx_, Schedule{OverlapMode::kRing, 2, Transport::kNccl}); });
  EXPECT_EQ(Run([&] { return EnqueueGemmAlone(*ctx_); }).gemms_beside, 0);
}

INSTANTIATE_TEST_SUITE_P(Ops, SmBudgetTest,
                         ::testing::Values(OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr),
                         [](const ::testing::TestParamInfo<OpType>& info) {
                           return std::string(OpTypeName(info.param));
                         });

}  // namespace
}  // namespace overlap::ops
