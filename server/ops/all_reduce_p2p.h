// Copy-engine all-reduces by layout (common/graph.h, AllReduceAlgorithm), out
// of place: rows [row, row + rows) of `cols` elements of dst[r] become the sum
// over ranks of the same rows of src[q]; src is only read and must not be dst.
// tp >= 2; `tag` keeps the events of different call sites apart. Ring and tree
// need no receive slot at tp = 2; above that, tree and parameter server use
// slot 0 of the ranks that add two inputs (the op's m / tp rows hold a piece).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "server/ops/collectives.h"
#include "server/ops/op_context.h"

namespace overlap::ops {

absl::Status AllReduceRingP2p(OpContext& ctx, On on, const std::vector<engine::BufferId>& src,
                              const std::vector<engine::BufferId>& dst, int64_t row, int64_t rows,
                              int64_t cols, int tag);
absl::Status AllReduceTreeP2p(OpContext& ctx, On on, const std::vector<engine::BufferId>& src,
                              const std::vector<engine::BufferId>& dst, int64_t row, int64_t rows,
                              int64_t cols, int tag);
absl::Status AllReduceParameterServerP2p(OpContext& ctx, On on,
                                         const std::vector<engine::BufferId>& src,
                                         const std::vector<engine::BufferId>& dst, int64_t row,
                                         int64_t rows, int64_t cols, int tag);

}  // namespace overlap::ops
