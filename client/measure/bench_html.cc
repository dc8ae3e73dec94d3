#include "client/measure/bench_html.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/format/html_chart.h"

namespace overlap::client {

namespace {

std::string ShapeLabel(const BenchShape& s) {
  return absl::StrFormat("%s %dx%dx%d", s.op, s.m, s.k, s.n);
}

}  // namespace

std::string BenchHtml(const std::vector<BenchRow>& rows,
                      const std::vector<BenchPrediction>& predictions,
                      const std::string& subtitle) {
  std::vector<std::string> shapes;
  // Ideal is 1 on this scale: a line across the bars, not a bar of its own.
  ChartSeries step{"auto step", {}}, serial{"serial", {}};
  ChartSeries hidden{"hidden", {}};
  for (const BenchRow& r : rows) {
    shapes.push_back(ShapeLabel(r.shape));
    const double base = r.ideal_ms > 0 ? r.ideal_ms : 0;
    step.values.push_back(base > 0 ? r.step_ms / base : 0);
    serial.values.push_back(base > 0 ? r.serial_ms / base : 0);
    // No bar where the table prints "-": a serial schedule hides nothing by design.
    hidden.values.push_back(r.hides && r.comm_ms > 0 ? 100 * std::max(0.0, r.hidden) : 0);
  }
  std::vector<HtmlSection> sections = {
      {"Step against ideal against serial, per shape",
       SvgBarChart({"step over ideal, ideal = max(GEMM alone, comm alone); lower is better",
                    shapes,
                    {step, serial},
                    "x ideal",
                    {{1, "ideal"}}})},
      {"Communication hidden, per shape",
       SvgBarChart({"hidden % of the collective alone", shapes, {hidden}, "%", {}})},
  };
  std::vector<std::string> predicted_shapes;
  ChartSeries predicted{"predicted", {}};
  for (size_t i = 0; i < rows.size() && i < predictions.size(); ++i) {
    if (!predictions[i].predicted || !(rows[i].step_ms > 0)) continue;
    predicted_shapes.push_back(ShapeLabel(rows[i].shape));
    predicted.values.push_back(predictions[i].step_ms / rows[i].step_ms);
  }
  if (!predicted_shapes.empty()) {
    sections.push_back({"Predicted beside measured",
                        SvgBarChart({"the planner's step over the measured step (measured = 1)",
                                     predicted_shapes,
                                     {predicted},
                                     "x measured",
                                     {{1, "measured"}}})});
  }
  return HtmlPage("overlapctl bench", subtitle, sections, CaveatLines(BenchCaveats(rows)));
}

std::string CommBenchHtml(const std::vector<CommBenchRow>& rows,
                          const std::vector<std::string>& variants, const std::string& subtitle,
                          const std::vector<std::string>& caveats) {
  std::map<std::string, std::vector<const CommBenchRow*>> by_collective;
  std::vector<std::string> order;
  for (const CommBenchRow& r : rows) {
    if (by_collective.count(r.collective) == 0) order.push_back(r.collective);
    by_collective[r.collective].push_back(&r);
  }
  std::vector<HtmlSection> sections;
  for (const std::string& collective : order) {
    std::vector<double> sizes;
    std::vector<ChartSeries> series;
    for (const std::string& v : variants) series.push_back({v, {}});
    for (const CommBenchRow* r : by_collective[collective]) {
      sizes.push_back(static_cast<double>(r->bytes));
      for (size_t i = 0; i < variants.size(); ++i) {
        auto it = r->by_transport.find(variants[i]);
        series[i].values.push_back(it == r->by_transport.end() ? 0 : it->second.busbw_gbps);
      }
    }
    sections.push_back({absl::StrCat(collective, ": bus bandwidth against message size"),
                        SvgLineChart(absl::StrCat(collective, " busbw (nccl-tests' definition)"),
                                     sizes, "message size", series, "GB/s", true)});
  }
  return HtmlPage("overlapctl commbench", subtitle, sections, caveats);
}

}  // namespace overlap::client
