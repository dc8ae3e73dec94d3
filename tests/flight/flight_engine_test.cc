#include "server/flight/flight_engine.h"

#include <gtest/gtest.h>

#include "server/engine/forwarding_engine.h"
#include "server/engine/host/host_engine.h"
#include "server/flight/flight_analysis.h"

namespace overlap::flight {
namespace {

// Two host devices behind a FlightEngine; the third all-gather fails as NCCL would.
class FlightEngineTest : public ::testing::Test {
 protected:
  void SetUp() override { Build(/*fail_async=*/false); }

  // The injected failure is returned by the call, or (`fail_async`) reported
  // by the next Synchronize only, as an asynchronous NCCL error or a timeout is.
  void Build(bool fail_async) {
    engine_.reset();
    args_ = {};
    engine::HostEngineOptions options;
    options.device_count = 2;
    options.fail_op = "all_gather";
    options.fail_after = 2;
    options.fail_async = fail_async;
    engine_ = std::make_unique<FlightEngine>(std::move(engine::CreateHostEngine(options)).value(),
                                             recorder_);
    for (int d = 0; d < 2; ++d) {
      engine::RankBuffers rank;
      rank.device = d;
      rank.stream = engine_->GetStream(d, engine::StreamRole::kComm);
      rank.send = {engine_->Allocate(d, 64).value(), 0, 64};
      rank.recv = {engine_->Allocate(d, 128).value(), 0, 128};
      args_.ranks.push_back(rank);
    }
    args_.dtype = DType::kF32;
    args_.count = 16;
  }

  FlightRecorder recorder_{8};
  std::unique_ptr<FlightEngine> engine_;
  engine::CollectiveArgs args_;
};

TEST_F(FlightEngineTest, RecordsEveryCollectiveWithItsJobAndState) {
  {
    ScopedFlightLabel label("job-3", "layer0.ag");
    ASSERT_TRUE(engine_->AllGather(args_).ok());
    ASSERT_TRUE(engine_->Synchronize({0, 1}).ok());
    ASSERT_TRUE(engine_->AllGather(args_).ok());
  }
  std::vector<RankRing> rings = recorder_.Snapshot("job-3");
  ASSERT_EQ(rings.size(), 2u);
  for (const RankRing& ring : rings) {
    EXPECT_EQ(ring.comm, "channel 0 ranks [0,1]");
    ASSERT_EQ(ring.entries.size(), 2u);
    EXPECT_EQ(ring.entries[0].op, "all_gather");
    EXPECT_EQ(ring.entries[0].bytes, 64);
    EXPECT_EQ(ring.entries[0].dtype, "fp32");
    EXPECT_EQ(ring.entries[0].job_op, "layer0.ag");
    EXPECT_EQ(ring.entries[0].state, FlightState::kFinished);
    EXPECT_EQ(ring.entries[1].state, FlightState::kEnqueued);
  }
  FlightVerdict verdict = Analyze(rings);
  EXPECT_EQ(verdict.kind, FlightVerdict::Kind::kNotFinished);
  EXPECT_EQ(verdict.seq, 2u);
  EXPECT_EQ(verdict.unfinished, (std::vector<int>{0, 1}));
}

TEST_F(FlightEngineTest, AFailedCollectiveIsTheVerdict) {
  ScopedFlightLabel label("job-4", "");
  ASSERT_TRUE(engine_->AllGather(args_).ok());
  ASSERT_TRUE(engine_->AllGather(args_).ok());
  ASSERT_TRUE(engine_->Synchronize({0, 1}).ok());
  const absl::Status failed = engine_->AllGather(args_);
  ASSERT_EQ(failed.code(), absl::StatusCode::kAborted) << failed;
  FlightVerdict verdict = Analyze(recorder_.Snapshot("job-4"));
  ASSERT_EQ(verdict.kind, FlightVerdict::Kind::kFailed);
  EXPECT_EQ(verdict.seq, 3u);
  EXPECT_EQ(verdict.failed, (std::vector<int>{0, 1}));
  EXPECT_EQ(verdict.OneLine(),
            "flight: collective #3 all_gather (channel 0 ranks [0,1], critical lane, job job-4) "
            "reached by 0,1, failed on 0,1");
}

// The job runner's path after a failed op: a Synchronize that reports the
// failed call's error again, then a clean one. The collectives before the
// failed one ran clean; the failed one stays failed, with its error.
TEST_F(FlightEngineTest, TheDrainAfterAFailedCallKeepsItFailed) {
  ScopedFlightLabel label("job-6", "fc1");
  ASSERT_TRUE(engine_->AllGather(args_).ok());
  ASSERT_TRUE(engine_->AllGather(args_).ok());
  const absl::Status failed = engine_->AllGather(args_);
  ASSERT_EQ(failed.code(), absl::StatusCode::kAborted) << failed;
  EXPECT_EQ(engine_->Synchronize({0, 1}), failed);
  ASSERT_TRUE(engine_->Synchronize({0, 1}).ok());
  for (const RankRing& ring : recorder_.Snapshot("job-6")) {
    ASSERT_EQ(ring.entries.size(), 3u);
    EXPECT_EQ(ring.entries[0].state, FlightState::kFinished);
    EXPECT_EQ(ring.entries[1].state, FlightState::kFinished);
    EXPECT_EQ(ring.entries[2].state, FlightState::kFailed);
    EXPECT_EQ(ring.entries[2].error, failed.ToString());
  }
  EXPECT_EQ(Analyze(recorder_.Snapshot("job-6")).OneLine(),
            "flight: collective #3 all_gather (channel 0 ranks [0,1], critical lane, job job-6 "
            "op fc1) reached by 0,1, failed on 0,1");
}

// An asynchronous failure: the call returns OK, the next Synchronize returns
// the error (and consumes it), the one after is clean. The collectives that
// Synchronize covered are aborted with its error and time, never finished.
TEST_F(FlightEngineTest, AFailedSynchronizeThenACleanOneLeavesItsCollectivesAborted) {
  ASSERT_NO_FATAL_FAILURE(Build(/*fail_async=*/true));
  ScopedFlightLabel label("job-5", "fc1");
  ASSERT_TRUE(engine_->AllGather(args_).ok());
  ASSERT_TRUE(engine_->AllGather(args_).ok());
  ASSERT_TRUE(engine_->Synchronize({0, 1}).ok());
  ASSERT_TRUE(engine_->AllGather(args_).ok());  // fails on its streams
  ASSERT_TRUE(engine_->AllGather(args_).ok());
  const absl::Status sync = engine_->Synchronize({0, 1});
  ASSERT_EQ(sync.code(), absl::StatusCode::kAborted) << sync;
  ASSERT_TRUE(engine_->Synchronize({0, 1}).ok());
  ASSERT_TRUE(engine_->AllGather(args_).ok());
  ASSERT_TRUE(engine_->Synchronize({0, 1}).ok());
  const std::vector<RankRing> rings = recorder_.Snapshot("job-5");
  ASSERT_EQ(rings.size(), 2u);
  for (const RankRing& ring : rings) {
    ASSERT_EQ(ring.entries.size(), 5u);
    EXPECT_EQ(ring.entries[0].state, FlightState::kFinished);
    EXPECT_EQ(ring.entries[1].state, FlightState::kFinished);
    for (int i : {2, 3}) {
      EXPECT_EQ(ring.entries[i].state, FlightState::kAborted) << i;
      EXPECT_EQ(ring.entries[i].error, sync.ToString()) << i;
      EXPECT_GE(ring.entries[i].finished_ns, ring.entries[i].enqueued_ns) << i;
    }
    EXPECT_EQ(ring.entries[4].state, FlightState::kFinished);
    EXPECT_EQ(ring.entries[4].error, "");
  }
  const FlightVerdict verdict = Analyze(rings);
  ASSERT_EQ(verdict.kind, FlightVerdict::Kind::kAborted);
  EXPECT_EQ(verdict.seq, 3u);
  EXPECT_EQ(verdict.aborted, (std::vector<int>{0, 1}));
  EXPECT_EQ(verdict.error, sync.ToString());
  EXPECT_EQ(verdict.OneLine(),
            "flight: collective #3 all_gather (channel 0 ranks [0,1], critical lane, job job-5 "
            "op fc1) reached by 0,1, aborted on 0,1");
}

// Ranks 0 and 1 of a four-rank mesh live here; 2 and 3 on another node.
class HalfLocalEngine final : public engine::ForwardingEngine {
 public:
  explicit HalfLocalEngine(engine::Engine& inner) : engine::ForwardingEngine(inner) {}
  bool IsLocalDevice(int device) const override { return device < 2; }
};

// A part's FlightEngine (scoped, its own ranks only) around the daemon's: the
// collective is recorded once, under the scope, for this node's ranks.
TEST_F(FlightEngineTest, NestedEnginesRecordOnceInTheOutermostScope) {
  HalfLocalEngine half(*engine_);
  FlightEngine part(half, recorder_, "a:1/job-1");
  ScopedFlightLabel label("a:1/job-1", "grads");
  // The host engine has no devices 2 and 3: the call fails, recorded so.
  EXPECT_FALSE(part.Barrier(0, {0, 2, 1, 3}, {}).ok());
  ASSERT_TRUE(part.Synchronize({0, 1}).ok());
  const std::vector<RankRing> rings = recorder_.Snapshot("a:1/job-1");
  ASSERT_EQ(rings.size(), 2u);
  for (const RankRing& ring : rings) {
    EXPECT_EQ(ring.comm, "channel 0 ranks [0,2,1,3] of a:1/job-1");
    EXPECT_LT(ring.rank, 2);
    ASSERT_EQ(ring.entries.size(), 1u);
    EXPECT_EQ(ring.entries[0].seq, 1u);
    EXPECT_EQ(ring.entries[0].state, FlightState::kFailed);
    EXPECT_EQ(ring.entries[0].job_op, "grads");
  }
  // Nothing under the daemon's own names: the inner engine forwarded only.
  for (const RankRing& ring : recorder_.Snapshot()) {
    EXPECT_NE(ring.comm.find(" of a:1/job-1"), std::string::npos) << ring.comm;
  }
  // A collective of the other node's ranks alone records nothing here.
  EXPECT_FALSE(part.Barrier(1, {2, 3}, {}).ok());
  EXPECT_EQ(recorder_.Snapshot("a:1/job-1").size(), 2u);
  EXPECT_EQ(recorder_.Usage().entries, 2);
  EXPECT_EQ(recorder_.Usage().rings, 2);
  EXPECT_GE(recorder_.Usage().cap_bytes, recorder_.Usage().bytes);
}

}  // namespace
}  // namespace overlap::flight
