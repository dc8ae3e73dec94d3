// Which timed cuBLASLt candidate a GEMM shape keeps (GemmLt::Tune). Free of
// CUDA so that the host tests check the rule.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

namespace overlap::cuda {

// best_ms[i]: candidate i's least timed time, infinity where its calls failed;
// index 0 is the heuristic's first pick. Keeps the fastest candidate unless
// the first pick is within `margin` (a share, >= 0) of it, then the first pick.
// -1 when every candidate failed or there are none.
inline int PickCandidate(const std::vector<float>& best_ms, double margin) {
  if (best_ms.empty()) return -1;
  size_t fastest = 0;
  for (size_t i = 1; i < best_ms.size(); ++i) {
    if (best_ms[i] < best_ms[fastest]) fastest = i;
  }
  if (!std::isfinite(best_ms[fastest])) return -1;
  if (std::isfinite(best_ms[0]) && best_ms[0] <= best_ms[fastest] * (1.0 + margin)) return 0;
  return static_cast<int>(fastest);
}

}  // namespace overlap::cuda
