// What a report says of an op over a group of one rank: there is nothing to
// communicate, so the daemon runs no collective (server/ops/layer_ops.h,
// EnqueueOp) and the op is its GEMM alone, or its input as its output.
#pragma once

namespace overlap {

// The op's schedule note (OpResult.auto_reason) at one rank.
inline constexpr char kOneRankNote[] = "one rank: no collective";

}  // namespace overlap
