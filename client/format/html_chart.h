// Self-contained HTML pages of SVG charts for `bench`, `commbench`,
// `compare` and `timeline` (--html FILE): inline styles, no scripts, nothing
// fetched. Pure formatting: no I/O.
//
// Each chart is drawn at a native width (kChartWidth) and scales with the page
// (viewBox, width 100%), so a page fits a 1024-pixel window. Labels are laid
// out not to collide: horizontal bars with their category names beside them,
// size labels thinned out on a line chart's x axis, legends wrapped into rows.
// Value axes tick at even 1-2-5 steps with one number of decimals. The
// classes on the SVG elements (title, value, category, reference, legend-entry,
// swatch, bar, span) are what tests/charts checks in headless Chromium.
#pragma once

#include <string>
#include <vector>

namespace overlap::client {

inline constexpr double kChartWidth = 880;

struct ChartSeries {
  std::string name;
  std::vector<double> values;  // one per category (bars) or per x (lines)
};

// A labelled line across the plot at `value`: "ideal" at 1 on a chart of
// ratios to ideal, "A" at 1 on B over A.
struct ReferenceLine {
  double value = 1;
  std::string label;
};

struct BarChart {
  std::string title;
  std::vector<std::string> categories;
  std::vector<ChartSeries> series;
  std::string unit;  // the value axis: "ms", "%" (drawn 0-100), "x ideal"
  std::vector<ReferenceLine> references;
};

// Horizontal grouped bars: a row per category, named at its left, a bar per
// series, a value axis from 0 under them and a legend of swatches.
std::string SvgBarChart(const BarChart& chart);

// Lines over x (drawn on a log2 axis when `log_x`): one polyline per series,
// points with value <= 0 left out.
std::string SvgLineChart(const std::string& title, const std::vector<double>& x,
                         const std::string& x_label, const std::vector<ChartSeries>& series,
                         const std::string& y_label, bool log_x);

// A lane per row of spans, [start, end) in ms: a Gantt chart. A span too short
// to see is drawn kMinSpanPx wide, so that a short copy still shows.
inline constexpr double kMinSpanPx = 3;
struct GanttSpan {
  double start_ms = 0, end_ms = 0;
  std::string label;
  int color = 0;  // index into a fixed palette
};
struct GanttLane {
  std::string name;
  std::vector<GanttSpan> spans;
};
struct LegendEntry {
  std::string name;
  int color = 0;
};
std::string SvgGantt(const std::string& title, const std::vector<GanttLane>& lanes,
                     const std::vector<LegendEntry>& legend);

struct HtmlSection {
  std::string heading;
  std::string body;  // SVG or HTML
};
// The page: a title, a line of context, the caveats the text output prints
// (each a sentence; a page of host-backend figures says they mean nothing),
// and one section per chart.
std::string HtmlPage(const std::string& title, const std::string& subtitle,
                     const std::vector<HtmlSection>& sections,
                     const std::vector<std::string>& caveats = {});

// The lines of `notes` (text output's note lines, each ending in '\n') as a
// page's caveats, empty lines left out.
std::vector<std::string> CaveatLines(const std::string& notes);

// Text made safe inside HTML and SVG.
std::string HtmlEscape(const std::string& text);

}  // namespace overlap::client
