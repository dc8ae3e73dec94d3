// Timing summaries and nccl-tests bandwidth formulas (see nccl-tests
// doc/PERFORMANCE.md). Thread-safe pure functions.
#pragma once

#include <vector>

namespace overlap {

struct Summary {
  double median = 0;
  double min = 0;
  double max = 0;
  int samples = 0;
};

// Median (mean of the two middle values for an even count), min, max. All zero
// for no samples.
Summary Summarize(std::vector<double> samples);

// The p-th percentile (0..100) of `samples`, nearest rank; 0 for none.
double Percentile(std::vector<double> samples, double p);

enum class Collective { kAllGather, kReduceScatter, kAllReduce };

// Algorithm bandwidth in GB/s (1e9 bytes/s): bytes / time. 0 when ms <= 0.
// `bytes` is the total data size as nccl-tests counts it: the full gathered
// output for all-gather, the full input for reduce-scatter, the buffer for all-reduce.
double AlgBwGBps(double bytes, double ms);

// The factor that turns algbw into bus bandwidth for `ranks` ranks:
// (n-1)/n for all-gather and reduce-scatter, 2(n-1)/n for all-reduce; 0 for n <= 1.
double BusBwFactor(Collective collective, int ranks);

// AlgBwGBps(bytes, ms) * BusBwFactor(collective, ranks).
double BusBwGBps(Collective collective, double bytes, double ms, int ranks);

}  // namespace overlap
