// The host engine's launch gates (engine/launch_gates.h): a held stream runs
// nothing queued behind the hold until the host releases it, a hold nobody
// releases lets go after its limit and is counted, and bad calls are refused.
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "tests/engine/host_test_util.h"

namespace overlap::engine {
namespace {

using testing::Download;
using testing::MakeHostEngine;
using testing::Upload;
using testing::Whole;

TEST(HostGateTest, WorkBehindAHoldWaitsForTheRelease) {
  auto engine = MakeHostEngine(2, /*hazards=*/false);  // the peek below races on purpose
  ASSERT_NE(engine->Gates(), nullptr);
  const StreamId held = engine->GetStream(0, StreamRole::kCompute);
  const StreamId other = engine->GetStream(1, StreamRole::kCompute);
  const size_t bytes = 64 * sizeof(float);
  const BufferId buffer = Upload(*engine, 0, std::vector<float>(64, 0.0f));
  const BufferId peek = Upload(*engine, 1, std::vector<float>(64, -1.0f));

  absl::StatusOr<int64_t> ticket = engine->Gates()->HoldStreams({held}, /*max_hold_ms=*/60000);
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  ASSERT_TRUE(engine->FillConstant(held, Whole(buffer, bytes), DType::kF32, 7.0f).ok());
  // Device 1 is not held: its copy of device 0's buffer runs now and sees the
  // fill not yet done.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(engine->PeerCopy(other, Whole(peek, bytes), 1, Whole(buffer, bytes), 0).ok());
  ASSERT_TRUE(engine->Synchronize({1}).ok());
  EXPECT_EQ(Download(*engine, 1, Whole(peek, bytes)), std::vector<float>(64, 0.0f));

  ASSERT_TRUE(engine->Gates()->ReleaseGate(*ticket).ok());
  ASSERT_TRUE(engine->Synchronize({0}).ok());
  EXPECT_EQ(Download(*engine, 0, Whole(buffer, bytes)), std::vector<float>(64, 7.0f));
  EXPECT_EQ(engine->Gates()->GateTimeouts(0), 0);
}

TEST(HostGateTest, AHoldNobodyReleasesLetsGoAndIsCounted) {
  auto engine = MakeHostEngine(2);
  const StreamId s0 = engine->GetStream(0, StreamRole::kCompute);
  const StreamId s1 = engine->GetStream(1, StreamRole::kCompute);
  auto before = engine->CreateEvent(0);
  auto after = engine->CreateEvent(0);
  ASSERT_TRUE(before.ok() && after.ok());
  ASSERT_TRUE(engine->RecordEvent(*before, s0).ok());
  ASSERT_TRUE(engine->Gates()->HoldStreams({s0, s1}, /*max_hold_ms=*/30).ok());
  ASSERT_TRUE(engine->RecordEvent(*after, s0).ok());
  ASSERT_TRUE(engine->Synchronize({0, 1}).ok());
  absl::StatusOr<double> held_ms = engine->ElapsedMs(*before, *after);
  ASSERT_TRUE(held_ms.ok()) << held_ms.status();
  EXPECT_GE(*held_ms, 29.0);
  EXPECT_EQ(engine->Gates()->GateTimeouts(0), 1);
  EXPECT_EQ(engine->Gates()->GateTimeouts(1), 1);
  // A release after the fact changes nothing; the next hold is released in time.
  absl::StatusOr<int64_t> next = engine->Gates()->HoldStreams({s0}, 60000);
  ASSERT_TRUE(next.ok());
  ASSERT_TRUE(engine->Gates()->ReleaseGate(*next).ok());
  ASSERT_TRUE(engine->Synchronize({0}).ok());
  EXPECT_EQ(engine->Gates()->GateTimeouts(0), 1);
}

TEST(HostGateTest, BadHoldsAreRefusedAndGatesCanBeOff) {
  auto engine = MakeHostEngine(2);
  EXPECT_EQ(engine->Gates()->HoldStreams({12345}, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  const StreamId s0 = engine->GetStream(0, StreamRole::kCompute);
  EXPECT_EQ(engine->Gates()->HoldStreams({s0}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->Gates()->GateTimeouts(7), 0);

  HostEngineOptions options;
  options.launch_gate = false;
  auto off = std::move(CreateHostEngine(options)).value();
  EXPECT_EQ(off->Gates(), nullptr);
}

}  // namespace
}  // namespace overlap::engine
