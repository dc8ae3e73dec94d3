#include "common/stats.h"

#include <algorithm>
#include <cmath>

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

double Percentile(std::vector<double> samples, double p) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(samples.size()));
  const size_t index = static_cast<size_t>(std::max(1.0, rank)) - 1;
  return samples[std::min(index, samples.size() - 1)];
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
