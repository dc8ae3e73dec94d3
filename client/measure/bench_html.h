// The pages `--html FILE` writes for bench and commbench (with or without
// --peers): self-contained HTML of SVG charts
// (client/format/html_chart.h), one section per chart.
#pragma once

#include <string>
#include <vector>

#include "client/measure/bench.h"
#include "client/measure/bench_prediction.h"
#include "client/measure/commbench.h"

namespace overlap::client {

// Step and serial against ideal per shape, hidden %, and, where predictions
// exist, predicted beside measured.
std::string BenchHtml(const std::vector<BenchRow>& rows,
                      const std::vector<BenchPrediction>& predictions, const std::string& subtitle);

// Bus bandwidth against message size, one chart per collective, a line per
// variant (transport or algorithm; dp / world / world/hierarchical with --peers).
std::string CommBenchHtml(const std::vector<CommBenchRow>& rows,
                          const std::vector<std::string>& variants, const std::string& subtitle);

}  // namespace overlap::client
