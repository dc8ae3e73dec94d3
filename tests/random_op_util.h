// Seeded random ops for the host tests that walk shapes and graphs rather than
// schedules: shapes that are no multiple of anything (a rank may hold a single
// row; up to 9 chunks, never more than its rows), every mode and transport
// each op type has, with the schedule written into the op (mode, chunks,
// transport, an all_reduce's algorithm), so that auto never runs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/graph.h"
#include "common/schedule.h"
#include "tests/random_int.h"

namespace overlap {

// An op of one of `types` for `tp` ranks, with id `id`. An all_reduce also gets
// an algorithm: any copy-engine layout over p2p, and NCCL's ring or tree over
// nccl where the backend can pin them (`library_algorithms`).
inline OpSpec RandomOp(std::mt19937& rng, int tp, const std::vector<OpType>& types,
                       std::string id = "op", bool library_algorithms = false) {
  OpSpec op;
  op.id = std::move(id);
  op.type = types[RandomInt(rng, 0, static_cast<int>(types.size()) - 1)];
  const int rows_per_rank = RandomInt(rng, 1, 40);
  op.m = int64_t{rows_per_rank} * tp;
  // The dimension split over the ranks must divide by tp; the others need not.
  const bool splits_n = op.type == OpType::kAgGemm || op.type == OpType::kGemm;
  if (IsCollectiveOnly(op.type)) {
    op.k = 0;
  } else {
    op.k = splits_n ? RandomInt(rng, 1, 48) : int64_t{RandomInt(rng, 1, 24)} * tp;
  }
  op.n = splits_n ? int64_t{RandomInt(rng, 1, 16)} * tp : RandomInt(rng, 1, 40);

  op.mode = OverlapMode::kSerial;
  op.chunks = 0;
  if (IsGemmOnly(op.type)) {
    op.transport = Transport::kNone;
    return op;
  }
  op.transport = RandomInt(rng, 0, 1) == 0 ? Transport::kNccl : Transport::kP2p;
  if (op.type == OpType::kAllReduce && (op.transport == Transport::kP2p || library_algorithms)) {
    const AllReduceAlgorithm algorithms[] = {AllReduceAlgorithm::kDefault, AllReduceAlgorithm::kRing,
                                             AllReduceAlgorithm::kTree,
                                             AllReduceAlgorithm::kParameterServer};
    op.algorithm = algorithms[RandomInt(rng, 0, op.transport == Transport::kP2p ? 3 : 2)];
  }
  if (tp == 1 || IsCollectiveOnly(op.type)) return op;
  const OverlapMode modes[] = {OverlapMode::kSerial, OverlapMode::kBulk, OverlapMode::kChunked,
                               OverlapMode::kRing};
  op.mode = modes[RandomInt(rng, 0, 3)];
  if (op.mode == OverlapMode::kChunked || op.mode == OverlapMode::kRing) {
    op.chunks = RandomInt(rng, 1, std::min(rows_per_rank, 9));
    // Direct stores exist only in the reduction rings.
    if (op.mode == OverlapMode::kRing && op.type != OpType::kAgGemm && RandomInt(rng, 0, 2) == 0) {
      op.transport = Transport::kDirect;
    }
  }
  return op;
}

// The schedule RandomOp wrote into `op`.
inline ops::Schedule ScheduleOf(const OpSpec& op) {
  return ops::Schedule{op.mode, op.chunks > 0 ? op.chunks : 1, op.transport, op.algorithm};
}

// For failure messages: "gemm_rs 24x48x7 ring/3/p2p".
inline std::string DescribeOp(const OpSpec& op) {
  return absl::StrCat(OpTypeName(op.type), " ", op.m, "x", op.k, "x", op.n, " ",
                      ScheduleOf(op).Name());
}

}  // namespace overlap
