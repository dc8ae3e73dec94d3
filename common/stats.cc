#include "common/stats.h"

#include <algorithm>

namespace overlap {

Summary Summarize(std::vector<double> samples) {
  Summary s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  s.samples = static_cast<int>(n);
  s.min = samples.front();
  s.max = samples.back();
  s.median = n % 2 == 1 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
  return s;
}

double AlgBwGBps(double bytes, double ms) {
  if (ms <= 0) return 0;
  return bytes / (ms * 1e-3) / 1e9;
}

double BusBwFactor(Collective collective, int ranks) {
  if (ranks <= 1) return 0;
  const double n = ranks;
  switch (collective) {
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      return (n - 1) / n;
    case Collective::kAllReduce:
      return 2 * (n - 1) / n;
  }
  return 0;
}

double BusBwGBps(Collective collective, double bytes, double ms, int ranks) {
  return AlgBwGBps(bytes, ms) * BusBwFactor(collective, ranks);
}

}  // namespace overlap
