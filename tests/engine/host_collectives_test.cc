// Collectives, point-to-point groups, peer copies and barriers of the host
// engine: exact contents against expectations computed here.
#include <numeric>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/host_test_util.h"

namespace overlap::engine {
namespace {

using ::testing::HasSubstr;
using testing::Download;
using testing::MakeHostEngine;
using testing::Upload;
using testing::Whole;

// Distinct per rank and element, exact in fp32 and (below 256) in bf16/fp16.
float Value(int rank, size_t i, DType dtype) {
  if (dtype == DType::kF32) return rank * 1000.0f + i + 0.25f;
  return static_cast<float>((rank * 37 + i * 3) % 61);
}

struct Param {
  int tp;
  DType dtype;
};

class HostCollectivesTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override { engine_ = MakeHostEngine(GetParam().tp); }

  // Every rank's send filled with Value(rank, i); recv uninitialized (NaN).
  CollectiveArgs Make(size_t count, size_t send_count, size_t recv_count) {
    const DType dtype = GetParam().dtype;
    const size_t es = DTypeSize(dtype);
    CollectiveArgs args;
    args.dtype = dtype;
    args.count = count;
    args.channel = 1;
    for (int r = 0; r < GetParam().tp; ++r) {
      std::vector<float> send(send_count);
      for (size_t i = 0; i < send_count; ++i) send[i] = Value(r, i, dtype);
      // Ranks are given in reverse device order: rank order is args order.
      const int device = GetParam().tp - 1 - r;
      RankBuffers rank;
      rank.device = device;
      rank.stream = engine_->GetStream(device, StreamRole::kComm, 1);
      rank.send = Whole(Upload(*engine_, device, send, dtype), send_count * es);
      rank.recv = Whole(*engine_->Allocate(device, recv_count * es), recv_count * es);
      args.ranks.push_back(rank);
    }
    return args;
  }

  std::vector<float> Recv(const CollectiveArgs& args, int rank) {
    return Download(*engine_, args.ranks[rank].device, args.ranks[rank].recv, args.dtype);
  }

  std::unique_ptr<Engine> engine_;
};

TEST_P(HostCollectivesTest, AllGatherConcatenatesInRankOrder) {
  const int tp = GetParam().tp;
  const size_t count = 37;
  CollectiveArgs args = Make(count, count, count * tp);
  ASSERT_TRUE(engine_->AllGather(args).ok());
  std::vector<int> all(tp);
  std::iota(all.begin(), all.end(), 0);
  ASSERT_TRUE(engine_->Synchronize(all).ok());
  std::vector<float> want;
  for (int r = 0; r < tp; ++r) {
    for (size_t i = 0; i < count; ++i) want.push_back(Value(r, i, GetParam().dtype));
  }
  for (int r = 0; r < tp; ++r) EXPECT_EQ(Recv(args, r), want) << "rank " << r;
}

TEST_P(HostCollectivesTest, ReduceScatterGivesRankIItsSummedBlock) {
  const int tp = GetParam().tp;
  const size_t count = 29;
  CollectiveArgs args = Make(count, count * tp, count);
  ASSERT_TRUE(engine_->ReduceScatter(args).ok());
  for (int r = 0; r < tp; ++r) {
    std::vector<float> want(count, 0.0f);
    for (size_t i = 0; i < count; ++i) {
      for (int s = 0; s < tp; ++s) want[i] += Value(s, r * count + i, GetParam().dtype);
    }
    EXPECT_EQ(Recv(args, r), want) << "rank " << r;
  }
}

TEST_P(HostCollectivesTest, AllReduceSums) {
  const int tp = GetParam().tp;
  const size_t count = 50;
  CollectiveArgs args = Make(count, count, count);
  ASSERT_TRUE(engine_->AllReduce(args).ok());
  std::vector<float> want(count, 0.0f);
  for (size_t i = 0; i < count; ++i) {
    for (int s = 0; s < tp; ++s) want[i] += Value(s, i, GetParam().dtype);
  }
  for (int r = 0; r < tp; ++r) EXPECT_EQ(Recv(args, r), want) << "rank " << r;
}

TEST_P(HostCollectivesTest, InPlaceAllReduceAndAllGather) {
  const int tp = GetParam().tp;
  const DType dtype = GetParam().dtype;
  const size_t es = DTypeSize(dtype), count = 16;
  // All-reduce with recv == send.
  CollectiveArgs reduce = Make(count, count, count);
  for (RankBuffers& rank : reduce.ranks) {
    engine_->Free(rank.recv.buffer);
    rank.recv = rank.send;
  }
  ASSERT_TRUE(engine_->AllReduce(reduce).ok());
  std::vector<float> want(count, 0.0f);
  for (size_t i = 0; i < count; ++i) {
    for (int s = 0; s < tp; ++s) want[i] += Value(s, i, dtype);
  }
  for (int r = 0; r < tp; ++r) EXPECT_EQ(Recv(reduce, r), want);
  // All-gather whose send is the rank's own block of recv (NCCL's in-place form).
  CollectiveArgs gather;
  gather.dtype = dtype;
  gather.count = count;
  std::vector<float> gathered;
  for (int r = 0; r < tp; ++r) {
    std::vector<float> full(count * tp, -7.0f);
    for (size_t i = 0; i < count; ++i) {
      full[r * count + i] = Value(r, i, dtype);
      gathered.push_back(Value(r, i, dtype));
    }
    const BufferId buffer = Upload(*engine_, r, full, dtype);
    gather.ranks.push_back({r, engine_->GetStream(r, StreamRole::kComm),
                            BufferRef{buffer, r * count * es, count * es},
                            Whole(buffer, count * tp * es)});
  }
  ASSERT_TRUE(engine_->AllGather(gather).ok());
  for (int r = 0; r < tp; ++r) {
    EXPECT_EQ(Download(*engine_, r, gather.ranks[r].recv, dtype), gathered);
  }
}

INSTANTIATE_TEST_SUITE_P(Groups, HostCollectivesTest,
                         ::testing::Values(Param{2, DType::kF32}, Param{4, DType::kF32},
                                           Param{2, DType::kBF16}, Param{4, DType::kBF16},
                                           Param{4, DType::kF16}),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return "tp" + std::to_string(info.param.tp) + "_" +
                                  DTypeName(info.param.dtype);
                         });

TEST(HostCollectivesMiscTest, ReduceScatterSumsBf16InFp32ThenRounds) {
  auto engine = MakeHostEngine(4);
  // 256 + 1 + 1 + 1 = 259 -> bf16 260; pairwise bf16 adds would give 256.
  CollectiveArgs args;
  args.dtype = DType::kBF16;
  args.count = 1;
  const float values[] = {256, 1, 1, 1};
  for (int r = 0; r < 4; ++r) {
    args.ranks.push_back({r, engine->GetStream(r, StreamRole::kComm),
                          Whole(Upload(*engine, r, std::vector<float>(4, values[r]), DType::kBF16), 8),
                          Whole(*engine->Allocate(r, 2), 2)});
  }
  ASSERT_TRUE(engine->ReduceScatter(args).ok());
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(Download(*engine, r, args.ranks[r].recv, DType::kBF16), std::vector<float>({260}));
  }
}

TEST(HostCollectivesMiscTest, RejectsMalformedCollectives) {
  auto engine = MakeHostEngine(2);
  CollectiveArgs args;
  args.dtype = DType::kF32;
  args.count = 8;
  for (int d = 0; d < 2; ++d) {
    args.ranks.push_back({d, engine->GetStream(d, StreamRole::kComm),
                          Whole(Upload(*engine, d, std::vector<float>(8, 1)), 32),
                          Whole(*engine->Allocate(d, 64), 64)});
  }
  CollectiveArgs bad = args;
  bad.ranks[1].recv.bytes = 60;
  absl::Status status = engine->AllGather(bad);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("all_gather rank 1 recv: 60 bytes given"));
  bad = args;
  bad.ranks[1].device = 0;
  status = engine->AllReduce(bad);
  EXPECT_THAT(status.message(), HasSubstr("device 0 appears twice"));
  bad = args;
  bad.ranks[0].stream = engine->GetStream(1, StreamRole::kComm);
  status = engine->AllReduce(bad);
  EXPECT_THAT(status.message(), HasSubstr("is not on device 0"));
  bad = args;
  bad.ranks[0].send = args.ranks[1].send;  // a buffer of device 1
  status = engine->AllReduce(bad);
  EXPECT_THAT(status.message(), HasSubstr("is on device 1, expected device 0"));
  EXPECT_EQ(engine->ReduceScatter(args).code(), absl::StatusCode::kInvalidArgument);  // send short
  bad = args;
  bad.channel = -1;
  EXPECT_EQ(engine->AllReduce(bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(engine->AllGather(args).ok());
}

TEST(HostCollectivesMiscTest, SendRecvRingExchange) {
  const int tp = 4;
  auto engine = MakeHostEngine(tp);
  std::vector<BufferId> bufs;
  for (int r = 0; r < tp; ++r) {
    std::vector<float> v(2 * 8, -1.0f);
    for (int i = 0; i < 8; ++i) v[i] = r * 100 + i;  // first half: own data, second: inbox
    bufs.push_back(Upload(*engine, r, v));
  }
  std::vector<Transfer> ring;
  for (int r = 0; r < tp; ++r) {
    const int next = (r + 1) % tp;
    ring.push_back({r, engine->GetStream(r, StreamRole::kComm), BufferRef{bufs[r], 0, 32}, next,
                    engine->GetStream(next, StreamRole::kComm), BufferRef{bufs[next], 32, 32}});
  }
  ASSERT_TRUE(engine->SendRecv(0, {0, 1, 2, 3}, ring, /*beside_gemm=*/false).ok());
  for (int r = 0; r < tp; ++r) {
    const int prev = (r + tp - 1) % tp;
    const std::vector<float> got = Download(*engine, r, Whole(bufs[r], 64));
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(got[i], r * 100 + i);
      EXPECT_EQ(got[8 + i], prev * 100 + i) << "rank " << r;
    }
  }
  // Every transfer's devices must be in the group.
  const absl::Status status = engine->SendRecv(0, {0, 1}, ring, /*beside_gemm=*/false);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("is not in the group"));
}

TEST(HostCollectivesMiscTest, SendRecvSwapInPlace) {
  auto engine = MakeHostEngine(2);
  const BufferId a = Upload(*engine, 0, {1, 2});
  const BufferId b = Upload(*engine, 1, {3, 4});
  const StreamId s0 = engine->GetStream(0, StreamRole::kComm);
  const StreamId s1 = engine->GetStream(1, StreamRole::kComm);
  // Both directions at once, each overwriting what the other sends.
  ASSERT_TRUE(engine
                  ->SendRecv(2, {0, 1},
                             {{0, s0, Whole(a, 8), 1, s1, Whole(b, 8)},
                              {1, s1, Whole(b, 8), 0, s0, Whole(a, 8)}},
                             /*beside_gemm=*/true)
                  .ok());
  EXPECT_EQ(Download(*engine, 0, Whole(a, 8)), std::vector<float>({3, 4}));
  EXPECT_EQ(Download(*engine, 1, Whole(b, 8)), std::vector<float>({1, 2}));
}

TEST(HostCollectivesMiscTest, PeerCopyOnEitherDevicesStream) {
  auto engine = MakeHostEngine(2);
  const BufferId src = Upload(*engine, 0, {1, 2, 3, 4});
  const BufferId dst = Upload(*engine, 1, {0, 0, 0, 0});
  ASSERT_TRUE(engine
                  ->PeerCopy(engine->GetStream(0, StreamRole::kComm), BufferRef{dst, 0, 8}, 1,
                             BufferRef{src, 8, 8}, 0)
                  .ok());
  ASSERT_TRUE(engine->Synchronize({0}).ok());
  ASSERT_TRUE(engine
                  ->PeerCopy(engine->GetStream(1, StreamRole::kComm, 1), BufferRef{dst, 8, 8}, 1,
                             BufferRef{src, 0, 8}, 0)
                  .ok());
  EXPECT_EQ(Download(*engine, 1, Whole(dst, 16)), std::vector<float>({3, 4, 1, 2}));
}

TEST(HostCollectivesMiscTest, BarrierOrdersStreamsOfAllDevices) {
  auto engine = MakeHostEngine(2, /*hazards=*/true);
  const StreamId c0 = engine->GetStream(0, StreamRole::kCompute);
  const StreamId c1 = engine->GetStream(1, StreamRole::kCompute);
  const BufferId x = Upload(*engine, 0, {0});
  const BufferId y = Upload(*engine, 1, {0});
  ASSERT_TRUE(engine->FillConstant(c0, Whole(x, 4), DType::kF32, 5).ok());
  ASSERT_TRUE(engine->Barrier(0, {0, 1}, {c0, c1}).ok());
  // Device 1 reads device 0's buffer after the barrier: ordered, and correct.
  ASSERT_TRUE(engine->PeerCopy(c1, Whole(y, 4), 1, Whole(x, 4), 0).ok());
  EXPECT_EQ(Download(*engine, 1, Whole(y, 4)), std::vector<float>({5}));
  EXPECT_EQ(engine->Barrier(0, {0, 1}, {c0}).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace overlap::engine
