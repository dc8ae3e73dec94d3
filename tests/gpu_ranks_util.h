// OVERLAP_TEST_RANKS_PER_GPU=2 gives the GPU tests' engine two ranks per GPU
// (config ranks_per_gpu), so that their multi-rank cases run, against the same
// float64 references, on a machine with one GPU.
#pragma once

#include <cstdlib>

#include "common/config.h"

namespace overlap {

inline void ApplyTestRanksPerGpu(DaemonConfig* config) {
  if (const char* ranks = std::getenv("OVERLAP_TEST_RANKS_PER_GPU")) {
    config->ranks_per_gpu = std::atoi(ranks);
  }
}

}  // namespace overlap
