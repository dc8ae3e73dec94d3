// A seeded uniform integer for the tests that draw random graphs, ops and
// lifecycle steps; header-only, so tests that link no server code use it too.
#pragma once

#include <random>

namespace overlap {

// Uniform in [lo, hi], both included.
inline int RandomInt(std::mt19937& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

}  // namespace overlap
