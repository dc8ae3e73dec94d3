// Self-contained HTML pages of SVG charts for `bench`, `commbench`,
// `compare` and `timeline` (--html FILE): inline styles, no scripts, nothing
// fetched. Pure formatting: no I/O.
#pragma once

#include <string>
#include <vector>

namespace overlap::client {

struct ChartSeries {
  std::string name;
  std::vector<double> values;  // one per category (bars) or per x (lines)
};

// Grouped bars: one group per category, one bar per series, with a value
// axis from 0. `unit` labels the axis ("ms", "%").
std::string SvgBarChart(const std::string& title, const std::vector<std::string>& categories,
                        const std::vector<ChartSeries>& series, const std::string& unit);

// Lines over x (drawn on a log2 axis when `log_x`): one polyline per series,
// points with value <= 0 left out.
std::string SvgLineChart(const std::string& title, const std::vector<double>& x,
                         const std::string& x_label, const std::vector<ChartSeries>& series,
                         const std::string& y_label, bool log_x);

// A lane per row of spans, [start, end) in ms: a Gantt chart.
struct GanttSpan {
  double start_ms = 0, end_ms = 0;
  std::string label;
  int color = 0;  // index into a fixed palette
};
struct GanttLane {
  std::string name;
  std::vector<GanttSpan> spans;
};
std::string SvgGantt(const std::string& title, const std::vector<GanttLane>& lanes);

struct HtmlSection {
  std::string heading;
  std::string body;  // SVG or HTML
};
// The page: a title, a line of context, and one section per chart.
std::string HtmlPage(const std::string& title, const std::string& subtitle,
                     const std::vector<HtmlSection>& sections);

// Text made safe inside HTML and SVG.
std::string HtmlEscape(const std::string& text);

}  // namespace overlap::client
