// The host engine's hazard checker (HostEngineOptions::hazard_checks): races
// are reported at enqueue time, deterministically, and correct programs pass.
#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/host/hazard_tracker.h"
#include "tests/engine/host_test_util.h"

namespace overlap::engine {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::Download;
using testing::MakeHostEngine;
using testing::Upload;
using testing::Whole;

constexpr int64_t kN = 16;

class HostHazardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = MakeHostEngine(2);
    comm_ = engine_->GetStream(0, StreamRole::kComm);
    compute_ = engine_->GetStream(0, StreamRole::kCompute);
    x_ = Upload(*engine_, 0, std::vector<float>(kN * kN, 1.0f));
    w_ = Upload(*engine_, 0, std::vector<float>(kN * kN, 0.5f));
    y_ = *engine_->Allocate(0, kN * kN * 4);
  }

  // y = x * w on the compute stream.
  absl::Status Gemm(BufferId a) {
    GemmArgs g;
    g.dtype = DType::kF32;
    g.m = g.n = g.k = kN;
    g.a = {a, 0, kN};
    g.b = {w_, 0, kN};
    g.c = {y_, 0, kN};
    return engine_->Gemm(compute_, g);
  }

  BufferRef X() const { return Whole(x_, kN * kN * 4); }

  std::unique_ptr<Engine> engine_;
  StreamId comm_, compute_;
  BufferId x_, w_, y_;
};

TEST_F(HostHazardTest, MissingWaitIsReportedEveryTime) {
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(engine_->FillConstant(comm_, X(), DType::kF32, 2.0f).ok());
    const absl::Status status = Gemm(x_);
    ASSERT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << "iteration " << i;
    EXPECT_THAT(status.message(),
                AllOf(HasSubstr("hazard: stream compute0@dev0 (gemm) reads buffer"),
                      HasSubstr("[0, 1024)"), HasSubstr("comm0@dev0 (fill_constant) may still write"),
                      HasSubstr("no event path from that write")));
    // Also the device's asynchronous error, reported once.
    EXPECT_EQ(engine_->Synchronize({0}).code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(engine_->Synchronize({0}).ok());
  }
}

TEST_F(HostHazardTest, SameProgramWithWaitPassesAndComputesCorrectly) {
  auto ready = engine_->CreateEvent(0);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(engine_->FillConstant(comm_, X(), DType::kF32, float(i)).ok());
    ASSERT_TRUE(engine_->RecordEvent(*ready, comm_).ok());
    ASSERT_TRUE(engine_->WaitEvent(compute_, *ready).ok());
    ASSERT_TRUE(Gemm(x_).ok()) << "iteration " << i;
    // The next iteration's fill must wait for this GEMM's read of x.
    ASSERT_TRUE(engine_->RecordEvent(*ready, compute_).ok());
    ASSERT_TRUE(engine_->WaitEvent(comm_, *ready).ok());
  }
  ASSERT_TRUE(engine_->Synchronize({0}).ok());
  // y = 49 * 0.5 * 16 everywhere.
  EXPECT_EQ(Download(*engine_, 0, Whole(y_, kN * kN * 4)), std::vector<float>(kN * kN, 392.0f));
}

TEST_F(HostHazardTest, OverwritingWhileGemmStillReadsIsReported) {
  // Ping-pong: the GEMM reads x while the comm stream brings the next chunk in.
  auto ready = engine_->CreateEvent(0);
  ASSERT_TRUE(engine_->RecordEvent(*ready, comm_).ok());
  ASSERT_TRUE(engine_->WaitEvent(compute_, *ready).ok());
  ASSERT_TRUE(Gemm(x_).ok());
  const BufferId next = Upload(*engine_, 1, std::vector<float>(kN * kN, 3.0f));
  const absl::Status status =
      engine_->PeerCopy(comm_, X(), 0, Whole(next, kN * kN * 4), 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("stream comm0@dev0 (peer_copy) writes buffer"),
                    HasSubstr("compute0@dev0 (gemm) may still read it"),
                    HasSubstr("no event path from that read")));
  // With the reverse wait it is fine.
  ASSERT_TRUE(engine_->RecordEvent(*ready, compute_).ok());
  ASSERT_TRUE(engine_->WaitEvent(comm_, *ready).ok());
  EXPECT_TRUE(engine_->PeerCopy(comm_, X(), 0, Whole(next, kN * kN * 4), 1).ok());
}

TEST_F(HostHazardTest, DisjointRangesOfOneBufferMayBeWrittenConcurrently) {
  const StreamId compute1 = engine_->GetStream(0, StreamRole::kCompute, 1);
  EXPECT_TRUE(engine_->FillConstant(comm_, BufferRef{x_, 0, 512}, DType::kF32, 1).ok());
  EXPECT_TRUE(engine_->FillConstant(compute1, BufferRef{x_, 512, 512}, DType::kF32, 2).ok());
  // Column blocks of one row-major output: interleaved, but not overlapping.
  GemmArgs g;
  g.dtype = DType::kF32;
  g.m = kN, g.n = kN / 2, g.k = kN;
  g.a = {w_, 0, kN};
  g.b = {w_, 0, kN};
  g.c = {y_, 0, kN};
  EXPECT_TRUE(engine_->Gemm(compute_, g).ok());
  g.b.offset = kN / 2;
  g.c.offset = kN / 2;
  EXPECT_TRUE(engine_->Gemm(compute1, g).ok());
  // One element more overlaps the other stream's columns.
  g.c.offset = kN / 2 - 1;
  g.b.offset = kN / 2 - 1;
  const absl::Status status = engine_->Gemm(engine_->GetStream(0, StreamRole::kComm, 1), g);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("may still write"));
  EXPECT_EQ(engine_->Synchronize({0}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Download(*engine_, 0, BufferRef{x_, 508, 8}), std::vector<float>({1, 2}));
}

TEST_F(HostHazardTest, WaitOnNeverRecordedEventDoesNothing) {
  auto never = engine_->CreateEvent(0);
  ASSERT_TRUE(engine_->FillConstant(comm_, X(), DType::kF32, 2.0f).ok());
  ASSERT_TRUE(engine_->WaitEvent(compute_, *never).ok());
  EXPECT_EQ(Gemm(x_).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(HostHazardTest, WaitUsesTheLatestRecordBeforeTheWaitCall) {
  auto e = engine_->CreateEvent(0);
  ASSERT_TRUE(engine_->RecordEvent(*e, comm_).ok());
  ASSERT_TRUE(engine_->WaitEvent(compute_, *e).ok());  // waits for the record above only
  ASSERT_TRUE(engine_->FillConstant(comm_, X(), DType::kF32, 2.0f).ok());
  ASSERT_TRUE(engine_->RecordEvent(*e, comm_).ok());  // too late for the wait
  EXPECT_EQ(Gemm(x_).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(engine_->WaitEvent(compute_, *e).ok());
  EXPECT_TRUE(Gemm(x_).ok());
}

TEST_F(HostHazardTest, ReadsFromTwoStreamsNeedNoOrder) {
  const StreamId compute1 = engine_->GetStream(0, StreamRole::kCompute, 1);
  const BufferId y2 = *engine_->Allocate(0, kN * kN * 4);
  ASSERT_TRUE(Gemm(x_).ok());
  EXPECT_TRUE(engine_->PeerCopy(compute1, Whole(y2, kN * kN * 4), 0, X(), 0).ok());
  // ...but a write after both needs both orderings.
  auto e = engine_->CreateEvent(0);
  ASSERT_TRUE(engine_->RecordEvent(*e, compute_).ok());
  ASSERT_TRUE(engine_->WaitEvent(comm_, *e).ok());
  const absl::Status status = engine_->FillConstant(comm_, X(), DType::kF32, 0);
  EXPECT_THAT(status.message(), HasSubstr("compute1@dev0 (peer_copy) may still read"));
}

// Host work (Gloo's collectives across daemons) declares what it only reads:
// a GEMM may read the same buffer beside it (bulk ag_gemm gathers A while the
// GEMM of its own rows reads A), but not read what the work writes.
TEST_F(HostHazardTest, HostWorkThatOnlyReadsABufferLetsOthersReadIt) {
  HostWorkQueue* host_work = engine_->HostWork();
  ASSERT_NE(host_work, nullptr);
  const BufferId out = *engine_->Allocate(0, kN * kN * 4);
  auto copy = [](const std::vector<uint8_t*>& data) {
    std::memcpy(data[1], data[0], kN * kN * 4);
    return absl::OkStatus();
  };
  ASSERT_TRUE(host_work
                  ->EnqueueHostWork(comm_, {{X(), /*written=*/false}, {Whole(out, kN * kN * 4)}},
                                    copy)
                  .ok());
  EXPECT_TRUE(Gemm(x_).ok());
  const absl::Status status = Gemm(out);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("comm0@dev0 (host_work) may still write"));
  EXPECT_EQ(engine_->Synchronize({0}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Download(*engine_, 0, Whole(out, kN * kN * 4)), std::vector<float>(kN * kN, 1.0f));
}

TEST_F(HostHazardTest, CollectivesJoinTheirStreams) {
  const StreamId comm1 = engine_->GetStream(1, StreamRole::kComm);
  const StreamId compute1 = engine_->GetStream(1, StreamRole::kCompute);
  CollectiveArgs args;
  args.dtype = DType::kF32;
  args.count = kN * kN;
  std::vector<BufferId> recv;
  for (int d = 0; d < 2; ++d) {
    recv.push_back(*engine_->Allocate(d, 2 * kN * kN * 4));
    args.ranks.push_back({d, d == 0 ? comm_ : comm1,
                          d == 0 ? X() : Whole(Upload(*engine_, 1, std::vector<float>(kN * kN, 4)),
                                               kN * kN * 4),
                          Whole(recv[d], 2 * kN * kN * 4)});
  }
  // Device 0's compute stream writes x, which rank 0 sends: no event, a race.
  ASSERT_TRUE(engine_->FillConstant(compute_, X(), DType::kF32, 2.0f).ok());
  const absl::Status race = engine_->AllGather(args);
  EXPECT_THAT(race.message(), HasSubstr("stream comm0@dev0 (all_gather) reads buffer"));
  EXPECT_EQ(engine_->Synchronize({0, 1}).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(engine_->FillConstant(compute_, X(), DType::kF32, 2.0f).ok());
  auto e0 = engine_->CreateEvent(0);
  ASSERT_TRUE(engine_->RecordEvent(*e0, compute_).ok());
  ASSERT_TRUE(engine_->WaitEvent(comm_, *e0).ok());
  ASSERT_TRUE(engine_->AllGather(args).ok());
  // Device 1's compute reads its gathered copy: needs an event from comm1...
  auto gemm_on_1 = [&] {
    GemmArgs g;
    g.dtype = DType::kF32;
    g.m = 2 * kN, g.n = 1, g.k = kN;
    g.a = {recv[1], 0, kN};
    g.b = {recv[1], 0, 1};
    g.c = {*engine_->Allocate(1, 2 * kN * 4), 0, 1};
    return engine_->Gemm(compute1, g);
  };
  EXPECT_EQ(gemm_on_1().code(), absl::StatusCode::kFailedPrecondition);
  auto e1 = engine_->CreateEvent(1);
  ASSERT_TRUE(engine_->RecordEvent(*e1, comm1).ok());
  ASSERT_TRUE(engine_->WaitEvent(compute1, *e1).ok());
  EXPECT_TRUE(gemm_on_1().ok());
  // ...and device 0's compute may now overwrite x: device 1 read it inside the
  // collective, which finished before comm1's record (the collective joins).
  ASSERT_TRUE(engine_->RecordEvent(*e1, compute1).ok());
  ASSERT_TRUE(engine_->WaitEvent(compute_, *e1).ok());
  EXPECT_TRUE(engine_->FillConstant(compute_, X(), DType::kF32, 0).ok());
  // The refused GEMM's race is still device 1's asynchronous error.
  EXPECT_EQ(engine_->Synchronize({0, 1}).code(), absl::StatusCode::kFailedPrecondition);
  const std::vector<float> gathered = Download(*engine_, 1, Whole(recv[1], 2 * kN * kN * 4));
  EXPECT_EQ(gathered[0], 2.0f);
  EXPECT_EQ(gathered[kN * kN], 4.0f);
}

TEST_F(HostHazardTest, SynchronizeOrdersEverythingBefore) {
  ASSERT_TRUE(engine_->FillConstant(comm_, X(), DType::kF32, 2.0f).ok());
  ASSERT_TRUE(engine_->Synchronize({0}).ok());
  EXPECT_TRUE(Gemm(x_).ok());
  // The comm stream may not overwrite y while the GEMM writes it...
  EXPECT_EQ(engine_->FillConstant(comm_, Whole(y_, 64), DType::kF32, 1.0f).code(),
            absl::StatusCode::kFailedPrecondition);
  // ...but after a synchronous host copy (which waits for device 0) it may.
  std::vector<float> host(kN * kN);
  ASSERT_EQ(engine_->CopyToHost(host.data(), Whole(y_, kN * kN * 4), 0).code(),
            absl::StatusCode::kOk);
  EXPECT_EQ(host[0], 16.0f);
  EXPECT_TRUE(engine_->FillConstant(comm_, Whole(y_, 64), DType::kF32, 1.0f).ok());
  EXPECT_EQ(Download(*engine_, 0, Whole(y_, 8)), std::vector<float>({1, 1}));
}

TEST_F(HostHazardTest, HostCopyRacesWithAnotherDevicesStream) {
  // Device 1's stream writes into device 0's buffer; syncing device 0 alone does
  // not order that.
  const BufferId src = Upload(*engine_, 1, std::vector<float>(4, 9.0f));
  ASSERT_TRUE(engine_->PeerCopy(engine_->GetStream(1, StreamRole::kComm), Whole(y_, 16), 0,
                                Whole(src, 16), 1)
                  .ok());
  std::vector<float> out(4);
  const absl::Status status = engine_->CopyToHost(out.data(), Whole(y_, 16), 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("the host (copy_to_host) reads buffer"),
                                      HasSubstr("not synchronized with the host")));
  ASSERT_TRUE(engine_->Synchronize({1}).ok());
  EXPECT_EQ(Download(*engine_, 0, Whole(y_, 16)), std::vector<float>(4, 9.0f));
}

TEST(HazardTrackerTest, StridedRegionsOverlapOnlyWhereRunsDo) {
  using engine::Region;
  const Region left = Region::Strided(0, 32, 64, 10);    // columns [0, 32) of 10 rows
  const Region right = Region::Strided(32, 32, 64, 10);  // columns [32, 64)
  EXPECT_FALSE(left.Overlaps(right));
  EXPECT_FALSE(right.Overlaps(left));
  EXPECT_TRUE(left.Overlaps(Region::Strided(28, 8, 64, 10)));
  EXPECT_TRUE(left.Overlaps(Region::Contiguous(600, 4)));   // row 9: [576, 608)
  EXPECT_FALSE(left.Overlaps(Region::Contiguous(608, 32)));  // past the last run
  EXPECT_FALSE(left.Overlaps(Region::Contiguous(32, 32)));   // the gap of row 0
  EXPECT_TRUE(Region::Strided(0, 64, 64, 10).contiguous());  // dense rows: one run
  EXPECT_TRUE(Region::Contiguous(0, 640).Covers(left));
  EXPECT_FALSE(left.Covers(Region::Contiguous(0, 8)));  // conservative for strided
}

TEST(HazardTrackerTest, RecordListsStayShort) {
  using engine::host::Access;
  using engine::host::HazardTracker;
  using engine::Region;
  HazardTracker tracker({"s0", "s1"});
  const Access read{7, Region::Contiguous(0, 64), false, 0};
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(tracker.Op({0}, {read}, "read").ok());
  EXPECT_EQ(tracker.RecordCount(7), 1u);
  // A covering write replaces everything it covers.
  const Access write{7, Region::Contiguous(0, 128), true, 0};
  ASSERT_TRUE(tracker.Op({0}, {write}, "write").ok());
  EXPECT_EQ(tracker.RecordCount(7), 1u);
  // Disjoint reads by another stream each stay (until the host synchronizes).
  for (int i = 0; i < 4; ++i) {
    const Access r{7, Region::Contiguous(256 + 16 * i, 16), false, 1};
    ASSERT_TRUE(tracker.Op({1}, {r}, "read").ok());
  }
  EXPECT_EQ(tracker.RecordCount(7), 5u);
  tracker.SyncHost({0, 1});
  EXPECT_EQ(tracker.RecordCount(7), 0u);
}

}  // namespace
}  // namespace overlap::engine
