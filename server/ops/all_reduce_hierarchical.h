// The hierarchical all-reduce of a world op over a mesh (common/graph.h,
// AllReduceAlgorithm::kHierarchical), out of place, on either transport:
//   1. reduce-scatter inside each tp group: tp rank t holds the tp group's sum
//      of its 1/tp share of the rows;
//   2. all-reduce that share across the replicas (tp rank t's dp group);
//   3. all-gather the shares inside each tp group.
// Each replica sends and receives S/tp across the replicas instead of S: the
// part of the traffic that crosses nodes when the replicas are nodes.
//
// Over NCCL each phase is one collective per group. Over the copy engines the
// rows go in dp pieces, so that a reduction's block fits the op's receive
// slots (m / (tp x dp) rows), and each phase waits for the peers it pulls from.
// rows must divide over tp x dp (ValidateJobSpec checks m does).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "server/ops/collectives.h"
#include "server/ops/op_context.h"

namespace overlap::ops {

absl::Status AllReduceHierarchical(OpContext& ctx, Transport transport, On on,
                                   const std::vector<engine::BufferId>& src,
                                   const std::vector<engine::BufferId>& dst, int64_t row,
                                   int64_t rows, int64_t cols, int tag);

}  // namespace overlap::ops
