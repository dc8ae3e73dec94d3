#include "client/format/html_chart.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/format/chart_layout.h"

namespace overlap::client {

namespace {

// Colour-blind-safe palette (Okabe-Ito).
constexpr const char* kPalette[] = {"#0072B2", "#E69F00", "#009E73", "#CC79A7",
                                    "#56B4E9", "#D55E00", "#F0E442", "#000000"};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

constexpr double kTickFontPx = 11;
constexpr double kTitleFontPx = 15;  // 14 px, bold
constexpr double kTitleLinePx = 18;

const char* Color(int i) { return kPalette[((i % kPaletteSize) + kPaletteSize) % kPaletteSize]; }

// The largest value of any series, 0 for none.
double LargestValue(const std::vector<ChartSeries>& series) {
  double most = 0;
  for (const ChartSeries& s : series) {
    for (double v : s.values) most = std::max(most, v);
  }
  return most;
}

std::string Number(double v) {
  if (v == 0) return "0";
  if (std::fabs(v) >= 100) return absl::StrFormat("%.0f", v);
  if (std::fabs(v) >= 10) return absl::StrFormat("%.1f", v);
  if (std::fabs(v) >= 1) return absl::StrFormat("%.2f", v);
  return absl::StrFormat("%.3g", v);
}

std::string Bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return absl::StrFormat("%g %s", b, units[u]);
}

// An <svg> chart's opening tag, scaling with the page from its native width,
// and its title in the lines given (WrapWords).
std::string SvgOpen(const char* kind, double width, double height, const std::string& title,
                    const std::vector<std::string>& title_lines) {
  std::string out = absl::StrFormat(
      "<svg xmlns='http://www.w3.org/2000/svg' class='chart' data-chart='%s' width='100%%' "
      "viewBox='0 0 %.0f %.0f' style='max-width:%.0fpx' role='img' aria-label='%s'>",
      kind, width, height, width, HtmlEscape(title));
  for (size_t i = 0; i < title_lines.size(); ++i) {
    absl::StrAppendFormat(&out, "<text x='10' y='%.0f' class='title'>%s</text>",
                          22 + kTitleLinePx * i, HtmlEscape(title_lines[i]));
  }
  return out;
}

double TitleBottom(const std::vector<std::string>& title_lines) {
  return 22 + kTitleLinePx * (std::max<size_t>(title_lines.size(), 1) - 1);
}

int LegendRows(const std::vector<LegendSlot>& slots) {
  return slots.empty() ? 0 : slots.back().row + 1;
}

// Swatches and names in rows from (x, y), the top of the first row.
std::string Legend(const std::vector<LegendEntry>& entries, const std::vector<LegendSlot>& slots,
                   double x, double y) {
  std::string out = "<g class='legend'>";
  for (size_t i = 0; i < entries.size() && i < slots.size(); ++i) {
    const double lx = x + slots[i].x, ly = y + kLegendRowPx * slots[i].row;
    absl::StrAppendFormat(&out,
                          "<g class='legend-entry'><rect class='swatch' x='%.1f' y='%.1f' "
                          "width='%.0f' height='%.0f' fill='%s'/>"
                          "<text x='%.1f' y='%.1f' class='legend'>%s</text></g>",
                          lx, ly, kSwatchPx, kSwatchPx, Color(entries[i].color), lx + kSwatchPx + 6,
                          ly + 10, HtmlEscape(entries[i].name));
  }
  return out + "</g>";
}

std::vector<LegendEntry> SeriesLegend(const std::vector<ChartSeries>& series) {
  std::vector<LegendEntry> entries;
  for (size_t i = 0; i < series.size(); ++i) {
    entries.push_back({series[i].name, static_cast<int>(i)});
  }
  return entries;
}

std::vector<std::string> Names(const std::vector<LegendEntry>& entries) {
  std::vector<std::string> names;
  for (const LegendEntry& e : entries) names.push_back(e.name);
  return names;
}

// A value axis's grid line and tick label at tick i, at `pos` along x (a
// vertical grid line from `from` to `to`, its label under it at y `label_at`)
// or along y (a horizontal one, its label right-aligned at x `label_at`).
std::string ValueTick(const AxisTicks& ticks, int i, double pos, bool along_x, double from,
                      double to, double label_at, const std::string& suffix) {
  const double value = ticks.Value(i);
  if (along_x) {
    return absl::StrFormat(
        "<line x1='%.2f' y1='%.1f' x2='%.2f' y2='%.1f' class='grid' data-axis='x' "
        "data-value='%.10g'/><text x='%.2f' y='%.1f' class='tick value' data-axis='x' "
        "data-value='%.10g' text-anchor='middle'>%s%s</text>",
        pos, from, pos, to, value, pos, label_at, value, ticks.Label(i), suffix);
  }
  return absl::StrFormat(
      "<line x1='%.1f' y1='%.2f' x2='%.1f' y2='%.2f' class='grid' data-axis='y' "
      "data-value='%.10g'/><text x='%.1f' y='%.2f' class='tick value' data-axis='y' "
      "data-value='%.10g' text-anchor='end'>%s%s</text>",
      from, pos, to, pos, value, label_at, pos + 4, value, ticks.Label(i), suffix);
}

}  // namespace

std::string HtmlEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string SvgBarChart(const BarChart& chart) {
  double label_w = 0;
  for (const std::string& c : chart.categories) {
    label_w = std::max(label_w, TextWidth(c, kTickFontPx));
  }
  const double left = 12 + label_w + 10, right = 28;
  const double plot_w = std::max(360.0, kChartWidth - left - right);
  const double width = left + plot_w + right;
  const std::vector<std::string> title_lines = WrapWords(chart.title, width - 20, kTitleFontPx);
  const double top = TitleBottom(title_lines) + (chart.references.empty() ? 16 : 32);
  const size_t series_count = std::max<size_t>(chart.series.size(), 1);
  const double bar_h = series_count == 1 ? 16 : 12;
  const double band = bar_h * series_count + 10;
  const double plot_h = band * std::max<size_t>(chart.categories.size(), 1);
  double most = LargestValue(chart.series);
  // A reference line sits inside the axis, not on its end.
  for (const ReferenceLine& r : chart.references) most = std::max(most, r.value * 1.05);
  // A share in % reads against its whole scale.
  const AxisTicks ticks = chart.unit == "%" ? AxisTicks{20, 5, 0} : NiceTicks(most);
  auto px = [&](double v) { return left + plot_w * std::min(v, ticks.Top()) / ticks.Top(); };
  const std::vector<LegendEntry> legend = SeriesLegend(chart.series);
  const std::vector<LegendSlot> slots = LayOutLegend(Names(legend), width - 24);
  const double legend_y = top + plot_h + 48;
  const double height = legend_y + kLegendRowPx * LegendRows(slots) + 6;

  std::string out = SvgOpen("bar", width, height, chart.title, title_lines);
  for (int i = 0; i <= ticks.intervals; ++i) {
    out += ValueTick(ticks, i, px(ticks.Value(i)), true, top, top + plot_h, top + plot_h + 16, "");
  }
  absl::StrAppendFormat(&out, "<text x='%.1f' y='%.1f' class='axis' text-anchor='middle'>%s</text>",
                        left + plot_w / 2, top + plot_h + 34, HtmlEscape(chart.unit));
  const double bar_w = bar_h - 2;
  for (size_t c = 0; c < chart.categories.size(); ++c) {
    const double band_top = top + band * c;
    absl::StrAppendFormat(&out,
                          "<text x='%.1f' y='%.1f' class='tick category' data-axis='y' "
                          "text-anchor='end'>%s</text>",
                          left - 8, band_top + band / 2 + 4, HtmlEscape(chart.categories[c]));
    for (size_t s = 0; s < chart.series.size(); ++s) {
      const double v = c < chart.series[s].values.size() ? chart.series[s].values[c] : 0;
      if (!(v > 0)) continue;
      absl::StrAppendFormat(&out,
                            "<rect class='bar' x='%.1f' y='%.1f' width='%.2f' height='%.1f' "
                            "fill='%s'><title>%s, %s: %s %s</title></rect>",
                            left, band_top + 5 + bar_h * s, std::max(px(v) - left, 1.5), bar_w,
                            Color(static_cast<int>(s)), HtmlEscape(chart.categories[c]),
                            HtmlEscape(chart.series[s].name), Number(v), HtmlEscape(chart.unit));
    }
  }
  for (const ReferenceLine& r : chart.references) {
    const double x = px(r.value), half = TextWidth(r.label, kTickFontPx) / 2;
    absl::StrAppendFormat(&out,
                          "<line class='reference' data-axis='x' data-value='%.10g' x1='%.2f' "
                          "y1='%.1f' x2='%.2f' y2='%.1f' stroke='#222' stroke-width='1.5' "
                          "stroke-dasharray='5 3'/><text x='%.1f' y='%.1f' "
                          "class='tick reference-label' text-anchor='middle'>%s</text>",
                          r.value, x, top - 4, x, top + plot_h,
                          std::clamp(x, half + 2, width - half - 2), top - 9, HtmlEscape(r.label));
  }
  out += Legend(legend, slots, left, legend_y);
  return out + "</svg>";
}

std::string SvgLineChart(const std::string& title, const std::vector<double>& x,
                         const std::string& x_label, const std::vector<ChartSeries>& series,
                         const std::string& y_label, bool log_x) {
  const AxisTicks ticks = NiceTicks(LargestValue(series));
  double tick_w = 0;
  for (int i = 0; i <= ticks.intervals; ++i) {
    tick_w = std::max(tick_w, TextWidth(ticks.Label(i), kTickFontPx));
  }
  std::vector<std::string> x_text;
  for (double v : x) x_text.push_back(log_x ? Bytes(v) : Number(v));
  const double last_w = x_text.empty() ? 0 : TextWidth(x_text.back(), kTickFontPx);
  const double left = 34 + tick_w + 8, right = std::max(28.0, last_w / 2 + 8);
  const double width = kChartWidth, plot_w = width - left - right, plot_h = 260;
  const std::vector<std::string> title_lines = WrapWords(title, width - 20, kTitleFontPx);
  const double top = TitleBottom(title_lines) + 18, bottom = top + plot_h;
  const std::vector<LegendEntry> legend = SeriesLegend(series);
  const std::vector<LegendSlot> slots = LayOutLegend(Names(legend), width - 24);
  const double legend_y = bottom + 54;
  const double height = legend_y + kLegendRowPx * LegendRows(slots) + 6;
  auto xv = [&](double v) { return log_x ? std::log2(std::max(v, 1e-300)) : v; };
  double x_lo = 0, x_hi = 1;
  if (!x.empty()) {
    x_lo = xv(*std::min_element(x.begin(), x.end()));
    x_hi = xv(*std::max_element(x.begin(), x.end()));
    if (x_hi <= x_lo) x_hi = x_lo + 1;
  }
  auto px = [&](double v) { return left + plot_w * (xv(v) - x_lo) / (x_hi - x_lo); };
  auto py = [&](double v) { return bottom - plot_h * std::min(v, ticks.Top()) / ticks.Top(); };

  std::string out = SvgOpen("line", width, height, title, title_lines);
  for (int i = 0; i <= ticks.intervals; ++i) {
    out += ValueTick(ticks, i, py(ticks.Value(i)), false, left, left + plot_w, left - 6, "");
  }
  // Every stride-th size label, the smallest stride that keeps them apart:
  // evenly thinned, so that the axis still reads at a glance.
  auto fits = [&](size_t stride) {
    double drawn_right = -1e9;
    for (size_t i = 0; i < x.size(); i += stride) {
      const double half = TextWidth(x_text[i], kTickFontPx) / 2;
      if (px(x[i]) - half < drawn_right + 10) return false;
      drawn_right = px(x[i]) + half;
    }
    return true;
  };
  size_t stride = 1;
  while (stride < x.size() && !fits(stride)) ++stride;
  for (size_t i = 0; i < x.size(); i += stride) {
    absl::StrAppendFormat(&out,
                          "<text x='%.1f' y='%.1f' class='tick category' data-axis='x' "
                          "text-anchor='middle'>%s</text>",
                          px(x[i]), bottom + 20, x_text[i]);
  }
  absl::StrAppendFormat(&out, "<text x='%.1f' y='%.1f' class='axis' text-anchor='middle'>%s</text>",
                        left + plot_w / 2, bottom + 40, HtmlEscape(x_label));
  absl::StrAppendFormat(&out,
                        "<text x='16' y='%.1f' class='axis' text-anchor='middle' "
                        "transform='rotate(-90 16 %.1f)'>%s</text>",
                        top + plot_h / 2, top + plot_h / 2, HtmlEscape(y_label));
  for (size_t s = 0; s < series.size(); ++s) {
    std::string points;
    for (size_t i = 0; i < x.size() && i < series[s].values.size(); ++i) {
      if (!(series[s].values[i] > 0)) continue;
      absl::StrAppendFormat(&points, "%.1f,%.1f ", px(x[i]), py(series[s].values[i]));
      absl::StrAppendFormat(&out,
                            "<circle cx='%.1f' cy='%.1f' r='3' fill='%s'><title>%s at %s: %s"
                            "</title></circle>",
                            px(x[i]), py(series[s].values[i]), Color(static_cast<int>(s)),
                            HtmlEscape(series[s].name), x_text[i], Number(series[s].values[i]));
    }
    absl::StrAppendFormat(&out, "<polyline points='%s' fill='none' stroke='%s' stroke-width='2'/>",
                          points, Color(static_cast<int>(s)));
  }
  out += Legend(legend, slots, left, legend_y);
  return out + "</svg>";
}

std::string SvgGantt(const std::string& title, const std::vector<GanttLane>& lanes,
                     const std::vector<LegendEntry>& legend) {
  double name_w = 0, end = 0;
  for (const GanttLane& l : lanes) {
    name_w = std::max(name_w, TextWidth(l.name, kTickFontPx));
    for (const GanttSpan& s : l.spans) end = std::max(end, s.end_ms);
  }
  // Many short steps: a Gantt chart is read against its time axis.
  const AxisTicks ticks = NiceTicks(end, 8);
  const double left = 12 + name_w + 10, right = 34, lane_h = 22;
  const double width = std::max(kChartWidth, left + 360 + right), plot_w = width - left - right;
  const std::vector<std::string> title_lines = WrapWords(title, width - 20, kTitleFontPx);
  const double top = TitleBottom(title_lines) + 18, bottom = top + lane_h * lanes.size();
  const std::vector<LegendSlot> slots = LayOutLegend(Names(legend), width - 24);
  const double legend_y = bottom + 30;
  const double height = legend_y + kLegendRowPx * LegendRows(slots) + 6;
  auto px = [&](double ms) { return left + plot_w * std::min(ms, ticks.Top()) / ticks.Top(); };

  std::string out = SvgOpen("gantt", width, height, title, title_lines);
  for (int i = 0; i <= ticks.intervals; ++i) {
    out += ValueTick(ticks, i, px(ticks.Value(i)), true, top, bottom, bottom + 16, " ms");
  }
  for (size_t i = 0; i < lanes.size(); ++i) {
    const double y = top + lane_h * i;
    absl::StrAppendFormat(&out,
                          "<text x='%.1f' y='%.1f' class='tick category' data-axis='y' "
                          "text-anchor='end'>%s</text>",
                          left - 8, y + 15, HtmlEscape(lanes[i].name));
    for (const GanttSpan& s : lanes[i].spans) {
      // A short span (a copy among long GEMMs) keeps a visible width.
      const double x = px(s.start_ms);
      const double w = std::min(std::max(px(s.end_ms) - x, kMinSpanPx), left + plot_w - x);
      absl::StrAppendFormat(&out,
                            "<rect class='span' x='%.2f' y='%.1f' width='%.2f' height='%.1f' "
                            "fill='%s'><title>%s: %s - %s ms</title></rect>",
                            std::min(x, left + plot_w - kMinSpanPx), y + 3, std::max(w, kMinSpanPx),
                            lane_h - 6, Color(s.color), HtmlEscape(s.label), Number(s.start_ms),
                            Number(s.end_ms));
    }
  }
  out += Legend(legend, slots, left, legend_y);
  return out + "</svg>";
}

std::vector<std::string> CaveatLines(const std::string& notes) {
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(notes, '\n', absl::SkipEmpty())) {
    lines.emplace_back(line);
  }
  return lines;
}

std::string HtmlPage(const std::string& title, const std::string& subtitle,
                     const std::vector<HtmlSection>& sections,
                     const std::vector<std::string>& caveats) {
  std::string out = absl::StrCat(
      "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
      "<meta name='viewport' content='width=device-width, initial-scale=1'><title>",
      HtmlEscape(title),
      "</title><style>"
      "body{font-family:'DejaVu Sans',system-ui,-apple-system,'Segoe UI',sans-serif;"
      "margin:24px;color:#222;max-width:1200px}"
      "h1{font-size:20px;margin:0 0 4px}p.sub{color:#555;margin:0 0 16px}"
      "h2{font-size:16px;margin:24px 0 8px}"
      "div.caveats{background:#fff4e0;border-left:4px solid #E69F00;padding:4px 12px;"
      "margin:0 0 16px}p.caveat{margin:6px 0}"
      "svg.chart{display:block;width:100%;height:auto}"
      "svg .title{font-size:14px;font-weight:600}svg .tick{font-size:11px;fill:#444}"
      "svg .axis{font-size:12px;fill:#222}svg .legend{font-size:12px;fill:#222}"
      "svg .reference-label{fill:#222}svg .grid{stroke:#ddd;stroke-width:1}"
      "</style></head><body>\n<h1>",
      HtmlEscape(title), "</h1>\n<p class='sub'>", HtmlEscape(subtitle), "</p>\n");
  if (!caveats.empty()) {
    out += "<div class='caveats'>";
    for (const std::string& c : caveats) {
      absl::StrAppend(&out, "<p class='caveat'>", HtmlEscape(c), "</p>");
    }
    out += "</div>\n";
  }
  for (const HtmlSection& s : sections) {
    absl::StrAppend(&out, "<section><h2>", HtmlEscape(s.heading), "</h2>\n", s.body,
                    "\n</section>\n");
  }
  return out + "</body></html>\n";
}

}  // namespace overlap::client
