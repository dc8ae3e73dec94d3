// Counter-based random numbers shared by the host code and the CUDA fill kernel:
// element i of a tensor seeded with s is the same value on every backend, so a
// float64 reference can regenerate any input without copying it back.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define OVERLAP_HOST_DEVICE __host__ __device__
#else
#define OVERLAP_HOST_DEVICE
#endif

namespace overlap {

OVERLAP_HOST_DEVICE inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1), 24 bits of resolution (exact in fp32; rounded for 16-bit types).
OVERLAP_HOST_DEVICE inline float SeededUniform(uint64_t seed, uint64_t index) {
  uint64_t bits = SplitMix64(SplitMix64(seed) ^ index);
  return static_cast<float>(bits >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

}  // namespace overlap
