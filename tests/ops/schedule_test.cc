// What `auto` may choose among. Direct stores exist only in the rings of the two
// ops whose GEMM output goes to other ranks, and only when asked for.
#include "common/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace overlap::ops {
namespace {

OpSpec Op(OpType type, Transport transport = Transport::kAuto,
          OverlapMode mode = OverlapMode::kAuto) {
  OpSpec op;
  op.id = "op";
  op.type = type;
  op.m = 1024;  // 512 rows per rank at tp = 2: chunks 2, 4, 8 keep >= 64 rows
  op.k = 256;
  op.n = 256;
  op.transport = transport;
  op.mode = mode;
  return op;
}

std::vector<std::string> Names(const std::vector<Schedule>& schedules) {
  std::vector<std::string> out;
  for (const Schedule& s : schedules) out.push_back(s.Name());
  return out;
}

std::vector<std::string> DirectOnes(const std::vector<Schedule>& schedules) {
  std::vector<std::string> out;
  for (const Schedule& s : schedules) {
    if (s.transport == Transport::kDirect) out.push_back(s.Name());
  }
  return out;
}

TEST(CandidateSchedulesTest, SerialNcclComesFirst) {
  for (OpType type : {OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr}) {
    const std::vector<Schedule> all = CandidateSchedules(Op(type), 2);
    ASSERT_FALSE(all.empty());
    EXPECT_EQ(all[0].Name(), "serial/nccl");
  }
}

TEST(CandidateSchedulesTest, DirectOnlyWhenAskedAndOnlyInTheReductionRings) {
  for (OpType type : {OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr}) {
    EXPECT_TRUE(DirectOnes(CandidateSchedules(Op(type), 2)).empty()) << OpTypeName(type);
  }
  // gemm_rs over direct has nothing to pipeline after its own block: one piece.
  EXPECT_EQ(DirectOnes(CandidateSchedules(Op(OpType::kGemmRs, Transport::kDirect), 2)),
            std::vector<std::string>({"ring/direct"}));
  // gemm_ar's own-block pieces feed its all-gather.
  EXPECT_EQ(DirectOnes(CandidateSchedules(Op(OpType::kGemmAr, Transport::kDirect), 2)),
            std::vector<std::string>(
                {"ring/direct", "ring/2/direct", "ring/4/direct", "ring/8/direct"}));
}

TEST(CandidateSchedulesTest, ExplicitDirectNarrowsToItsRings) {
  EXPECT_EQ(Names(CandidateSchedules(Op(OpType::kGemmRs, Transport::kDirect), 2)),
            std::vector<std::string>({"ring/direct"}));
  OpSpec ar = Op(OpType::kGemmAr, Transport::kDirect, OverlapMode::kRing);
  ar.chunks = 4;
  EXPECT_EQ(Names(CandidateSchedules(ar, 2)), std::vector<std::string>({"ring/4/direct"}));
  ar.chunks = 2;
  ar.type = OpType::kGemmRs;  // an explicit chunk count wins over the one-piece default
  EXPECT_EQ(Names(CandidateSchedules(ar, 2)), std::vector<std::string>({"ring/2/direct"}));
}

TEST(CandidateSchedulesTest, OneRankRunsSerialOnly) {
  EXPECT_EQ(Names(CandidateSchedules(Op(OpType::kGemmAr, Transport::kDirect), 1)),
            std::vector<std::string>({"serial/nccl"}));
}

// An all_reduce's algorithm rides on every transport that has it: ring and
// tree on both, ps on the copy engines only; one rank moves nothing.
TEST(CandidateSchedulesTest, AllReduceAlgorithmNarrowsTheTransports) {
  OpSpec op = Op(OpType::kAllReduce);
  op.k = 0;
  EXPECT_EQ(Names(CandidateSchedules(op, 2)),
            (std::vector<std::string>{"serial/nccl", "serial/p2p"}));
  op.algorithm = AllReduceAlgorithm::kTree;
  EXPECT_EQ(Names(CandidateSchedules(op, 2)),
            (std::vector<std::string>{"serial/nccl/tree", "serial/p2p/tree"}));
  op.algorithm = AllReduceAlgorithm::kParameterServer;
  EXPECT_EQ(Names(CandidateSchedules(op, 4)), (std::vector<std::string>{"serial/p2p/ps"}));
  op.algorithm = AllReduceAlgorithm::kRing;
  op.transport = Transport::kNccl;
  EXPECT_EQ(Names(CandidateSchedules(op, 2)), (std::vector<std::string>{"serial/nccl/ring"}));
  EXPECT_EQ(Names(CandidateSchedules(op, 1)), (std::vector<std::string>{"serial/nccl"}));
  // auto: every layout of each transport, NCCL's pinned ones where the backend has them.
  op.algorithm = AllReduceAlgorithm::kAuto;
  op.transport = Transport::kAuto;
  EXPECT_EQ(
      Names(CandidateSchedules(op, 4)),
      (std::vector<std::string>{"serial/nccl", "serial/nccl/ring", "serial/nccl/tree", "serial/p2p",
                                "serial/p2p/ring", "serial/p2p/tree", "serial/p2p/ps"}));
  EXPECT_EQ(Names(CandidateSchedules(op, 4, /*library_algorithms=*/false)),
            (std::vector<std::string>{"serial/nccl", "serial/p2p", "serial/p2p/ring",
                                      "serial/p2p/tree", "serial/p2p/ps"}));
  op.transport = Transport::kNccl;
  EXPECT_EQ(Names(CandidateSchedules(op, 2)),
            (std::vector<std::string>{"serial/nccl", "serial/nccl/ring", "serial/nccl/tree"}));
  const Schedule ring{OverlapMode::kSerial, 1, Transport::kP2p, AllReduceAlgorithm::kRing};
  EXPECT_FALSE(ring == (Schedule{OverlapMode::kSerial, 1, Transport::kP2p}));
}

TEST(CandidateSchedulesTest, ChunksNarrowAutosChunkedAndRingCandidates) {
  OpSpec op = Op(OpType::kGemmRs, Transport::kP2p);
  op.chunks = 3;
  EXPECT_EQ(Names(CandidateSchedules(op, 2)),
            std::vector<std::string>({"serial/p2p", "bulk/p2p", "chunked/3/p2p", "ring/3/p2p"}));
}

// The rows of every piece, in order.
std::vector<int64_t> PieceRows(int64_t rows, int chunks) {
  std::vector<int64_t> out;
  int64_t next = 0;
  for (int c = 0; c < chunks; ++c) {
    const Piece p = PieceOf(rows, chunks, c);
    EXPECT_EQ(p.row, next) << "piece " << c << " of " << rows << "/" << chunks;
    next = p.row + p.rows;
    out.push_back(p.rows);
  }
  EXPECT_EQ(next, rows);
  return out;
}

TEST(PieceTest, EqualWhereTheCountDivides) {
  EXPECT_EQ(PieceRows(4096, 4), std::vector<int64_t>({1024, 1024, 1024, 1024}));
  EXPECT_EQ(PieceRows(100, 4), std::vector<int64_t>({25, 25, 25, 25}));
  EXPECT_EQ(PieceRows(7, 1), std::vector<int64_t>({7}));
  EXPECT_EQ(MaxPieceRows(4096, 4), 1024);
}

TEST(PieceTest, OtherwiseOnWholeTilesWithTheSmallestLast) {
  EXPECT_EQ(PieceRows(4096, 3), std::vector<int64_t>({1408, 1344, 1344}));
  EXPECT_EQ(PieceRows(2048, 3), std::vector<int64_t>({704, 704, 640}));
  EXPECT_EQ(PieceRows(256, 3), std::vector<int64_t>({88, 88, 80}));  // 8-row units
  EXPECT_EQ(PieceRows(10, 4), std::vector<int64_t>({3, 2, 3, 2}));   // single rows
  EXPECT_EQ(PieceRows(5, 5), std::vector<int64_t>({1, 1, 1, 1, 1}));
  EXPECT_EQ(MaxPieceRows(4096, 3), 1408);
  for (int64_t rows : {3, 17, 64, 129, 1000, 4095, 8191}) {
    for (int chunks = 1; chunks <= std::min<int64_t>(rows, 16); ++chunks) {
      for (int64_t r : PieceRows(rows, chunks)) EXPECT_GT(r, 0) << rows << "/" << chunks;
    }
  }
}

}  // namespace
}  // namespace overlap::ops
