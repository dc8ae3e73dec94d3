// The pages `--html FILE` writes for bench, commbench (with or without
// --nodes) and compare: self-contained HTML of SVG charts
// (client/format/html_chart.h), one section per chart.
#pragma once

#include <string>
#include <vector>

#include "client/bench/bench.h"
#include "client/bench/bench_prediction.h"
#include "client/bench/commbench.h"
#include "client/bench/compare.h"

namespace overlap::client {

// Step and serial against ideal per shape, hidden %, and, where predictions
// exist, predicted beside measured.
std::string BenchHtml(const std::vector<BenchRow>& rows,
                      const std::vector<BenchPrediction>& predictions, const std::string& subtitle);

// Bus bandwidth against message size, one chart per collective, a line per
// variant (transport or algorithm; dp / world / world/hierarchical with --nodes).
std::string CommBenchHtml(const std::vector<CommBenchRow>& rows,
                          const std::vector<std::string>& variants, const std::string& subtitle);

// The two jobs' ops side by side: step per op, and B's step over A's.
std::string CompareHtml(const v1::Job& a, const v1::Job& b, const Comparison& c);

}  // namespace overlap::client
