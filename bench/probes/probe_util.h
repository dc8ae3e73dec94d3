// Shared by the GEMM probes (gemm_probe, gemm_algos): bench tools, not product
// code, so a failed CUDA call just ends the program with its message.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK_CUDA(x)                                                 \
  do {                                                                \
    cudaError_t e = (x);                                              \
    if (e != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e));    \
      std::exit(1);                                                   \
    }                                                                 \
  } while (0)

namespace overlap::bench {

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace overlap::bench
