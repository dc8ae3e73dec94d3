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

// Step and serial over ideal per shape (a line at ideal), hidden %, and, where
// predictions exist, predicted over measured (a line at measured); the
// caveats the text prints under its table (BenchCaveats).
std::string BenchHtml(const std::vector<BenchRow>& rows,
                      const std::vector<BenchPrediction>& predictions, const std::string& subtitle);

// Bus bandwidth against message size, one chart per collective, a line per
// variant (transport or algorithm; dp / world / world/hierarchical with --peers).
// `caveats`: the text's note lines (CaveatLines), such as HostFiguresNote.
std::string CommBenchHtml(const std::vector<CommBenchRow>& rows,
                          const std::vector<std::string>& variants, const std::string& subtitle,
                          const std::vector<std::string>& caveats = {});

}  // namespace overlap::client
