// Test helper shared by the tests that fill the tuning cache by hand.
#pragma once

#include <cstdint>
#include <string>

#include "server/runner/tuning_cache.h"

namespace overlap {

// A bf16, tp = 2 key of op type `op`, global shape m x k x n, as auto asks it
// (auto/0/auto), measured in `environment`.
inline runner::TuningKey MakeTuningKey(const std::string& op, int64_t m, int64_t k, int64_t n,
                                    const std::string& environment) {
  runner::TuningKey key;
  key.op_type = op;
  key.m = m;
  key.k = k;
  key.n = n;
  key.dtype = "bf16";
  key.tp = 2;
  key.requested = "auto/0/auto";
  key.environment = environment;
  return key;
}

}  // namespace overlap
