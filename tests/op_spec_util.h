// Test helper shared by the host tests that build layer graphs op by op.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/graph.h"

namespace overlap {

// An op of global shape m x k x n (k = 0 for a collective alone) after `after`;
// mode and transport stay auto.
inline OpSpec MakeOp(std::string id, OpType type, int64_t m, int64_t k, int64_t n,
                     std::vector<std::string> after = {}) {
  OpSpec op;
  op.id = std::move(id);
  op.type = type;
  op.m = m;
  op.k = k;
  op.n = n;
  op.after = std::move(after);
  return op;
}

}  // namespace overlap
