#include "client/format/html_chart.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace overlap::client {

namespace {

// Colour-blind-safe palette (Okabe-Ito).
constexpr const char* kPalette[] = {"#0072B2", "#E69F00", "#009E73", "#CC79A7",
                                    "#56B4E9", "#D55E00", "#F0E442", "#000000"};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

const char* Color(int i) { return kPalette[((i % kPaletteSize) + kPaletteSize) % kPaletteSize]; }

// A "nice" axis top: 1, 2 or 5 times a power of ten, at or above `value`.
double NiceTop(double value) {
  if (!(value > 0)) return 1;
  const double magnitude = std::pow(10, std::floor(std::log10(value)));
  for (double step : {1.0, 2.0, 5.0, 10.0}) {
    if (step * magnitude >= value) return step * magnitude;
  }
  return 10 * magnitude;
}

// The largest value of any series, 0 for none.
double LargestValue(const std::vector<ChartSeries>& series) {
  double most = 0;
  for (const ChartSeries& s : series) {
    for (double v : s.values) most = std::max(most, v);
  }
  return most;
}

// An <svg> chart's opening tag, sized and labelled, and its title.
std::string SvgOpen(double width, double height, const std::string& title) {
  std::string out = absl::StrFormat(
      "<svg xmlns='http://www.w3.org/2000/svg' class='chart' width='%.0f' height='%.0f' "
      "viewBox='0 0 %.0f %.0f' role='img' aria-label='%s'>",
      width, height, width, height, HtmlEscape(title));
  absl::StrAppendFormat(&out, "<text x='%.0f' y='22' class='title'>%s</text>", 10.0,
                        HtmlEscape(title));
  return out;
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

std::string Legend(const std::vector<ChartSeries>& series, double x, double y) {
  std::string out;
  for (size_t i = 0; i < series.size(); ++i) {
    const double lx = x + 150.0 * i;
    absl::StrAppendFormat(&out,
                          "<rect x='%.1f' y='%.1f' width='12' height='12' fill='%s'/>"
                          "<text x='%.1f' y='%.1f' class='legend'>%s</text>",
                          lx, y, Color(i), lx + 16, y + 10, HtmlEscape(series[i].name));
  }
  return out;
}

}  // namespace

std::string HtmlEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string SvgBarChart(const std::string& title, const std::vector<std::string>& categories,
                        const std::vector<ChartSeries>& series, const std::string& unit) {
  // Room on the left for the first category's slanted label.
  size_t longest = 0;
  for (const std::string& c : categories) longest = std::max(longest, c.size());
  // Slanted labels (35 degrees, ~6.5 px a character) and the legend under them.
  const double left = 120, right = 20, top = 40, bottom = std::max(120.0, 56 + 3.8 * longest);
  const double count = std::max<size_t>(categories.size(), 1);
  const double group = std::max(18.0 * std::max<size_t>(series.size(), 1) + 16, 440.0 / count);
  const double plot_w = group * count;
  const double plot_h = 260;
  // Wide enough for the legend under it.
  const double width = std::max(left + plot_w + right, left + 150.0 * series.size() + right);
  const double height = top + plot_h + bottom;
  const double most = LargestValue(series);
  // A share in % reads against its whole scale.
  const double top_value = unit == "%" ? 100 : NiceTop(most);
  std::string out = SvgOpen(width, height, title);
  for (int t = 0; t <= 4; ++t) {
    const double v = top_value * t / 4, y = top + plot_h - plot_h * t / 4;
    absl::StrAppendFormat(&out,
                          "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' class='grid'/>"
                          "<text x='%.1f' y='%.1f' class='tick' text-anchor='end'>%s</text>",
                          left, y, left + plot_w, y, left - 6, y + 4, Number(v));
  }
  absl::StrAppendFormat(&out,
                        "<text x='%.1f' y='%.1f' class='axis' transform='rotate(-90 %.1f %.1f)' "
                        "text-anchor='middle'>%s</text>",
                        left - 50, top + plot_h / 2, left - 50, top + plot_h / 2,
                        HtmlEscape(unit));
  const double bar = (group - 16) / std::max<size_t>(series.size(), 1);
  for (size_t c = 0; c < categories.size(); ++c) {
    const double gx = left + group * c + 8;
    for (size_t s = 0; s < series.size(); ++s) {
      const double v = c < series[s].values.size() ? series[s].values[c] : 0;
      if (!(v > 0)) continue;
      const double h = plot_h * std::min(v, top_value) / top_value;
      absl::StrAppendFormat(&out,
                            "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='%s'>"
                            "<title>%s, %s: %s %s</title></rect>",
                            gx + bar * s, top + plot_h - h, std::max(bar - 1, 1.0), h, Color(s),
                            HtmlEscape(categories[c]), HtmlEscape(series[s].name), Number(v),
                            HtmlEscape(unit));
    }
    const double cx = gx + (group - 16) / 2, cy = top + plot_h + 12;
    absl::StrAppendFormat(&out,
                          "<text x='%.1f' y='%.1f' class='tick' text-anchor='end' "
                          "transform='rotate(-35 %.1f %.1f)'>%s</text>",
                          cx, cy, cx, cy, HtmlEscape(categories[c]));
  }
  out += Legend(series, left, height - 18);
  return out + "</svg>";
}

std::string SvgLineChart(const std::string& title, const std::vector<double>& x,
                         const std::string& x_label, const std::vector<ChartSeries>& series,
                         const std::string& y_label, bool log_x) {
  const double left = 70, right = 30, top = 40, bottom = 70, plot_w = 560, plot_h = 260;
  const double width = left + plot_w + right, height = top + plot_h + bottom;
  auto xv = [&](double v) { return log_x ? std::log2(std::max(v, 1e-300)) : v; };
  double x_lo = 0, x_hi = 1;
  if (!x.empty()) {
    x_lo = xv(*std::min_element(x.begin(), x.end()));
    x_hi = xv(*std::max_element(x.begin(), x.end()));
    if (x_hi <= x_lo) x_hi = x_lo + 1;
  }
  const double top_value = NiceTop(LargestValue(series));
  auto px = [&](double v) { return left + plot_w * (xv(v) - x_lo) / (x_hi - x_lo); };
  auto py = [&](double v) { return top + plot_h - plot_h * std::min(v, top_value) / top_value; };
  std::string out = SvgOpen(width, height, title);
  for (int t = 0; t <= 4; ++t) {
    const double v = top_value * t / 4;
    absl::StrAppendFormat(&out,
                          "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' class='grid'/>"
                          "<text x='%.1f' y='%.1f' class='tick' text-anchor='end'>%s</text>",
                          left, py(v), left + plot_w, py(v), left - 6, py(v) + 4, Number(v));
  }
  for (double v : x) {
    absl::StrAppendFormat(&out, "<text x='%.1f' y='%.1f' class='tick' text-anchor='middle'>%s</text>",
                          px(v), top + plot_h + 16, log_x ? Bytes(v) : Number(v));
  }
  absl::StrAppendFormat(&out, "<text x='%.1f' y='%.1f' class='axis' text-anchor='middle'>%s</text>",
                        left + plot_w / 2, top + plot_h + 36, HtmlEscape(x_label));
  absl::StrAppendFormat(&out,
                        "<text x='14' y='%.1f' class='axis' transform='rotate(-90 14 %.1f)'>%s"
                        "</text>",
                        top + plot_h / 2, top + plot_h / 2, HtmlEscape(y_label));
  for (size_t s = 0; s < series.size(); ++s) {
    std::string points;
    for (size_t i = 0; i < x.size() && i < series[s].values.size(); ++i) {
      if (!(series[s].values[i] > 0)) continue;
      absl::StrAppendFormat(&points, "%.1f,%.1f ", px(x[i]), py(series[s].values[i]));
      absl::StrAppendFormat(&out,
                            "<circle cx='%.1f' cy='%.1f' r='3' fill='%s'><title>%s at %s: %s"
                            "</title></circle>",
                            px(x[i]), py(series[s].values[i]), Color(s),
                            HtmlEscape(series[s].name), log_x ? Bytes(x[i]) : Number(x[i]),
                            Number(series[s].values[i]));
    }
    absl::StrAppendFormat(&out, "<polyline points='%s' fill='none' stroke='%s' stroke-width='2'/>",
                          points, Color(s));
  }
  out += Legend(series, left, height - 18);
  return out + "</svg>";
}

std::string SvgGantt(const std::string& title, const std::vector<GanttLane>& lanes) {
  const double left = 170, right = 50, top = 40, lane_h = 22, plot_w = 760;
  double end = 0;
  for (const GanttLane& l : lanes) {
    for (const GanttSpan& s : l.spans) end = std::max(end, s.end_ms);
  }
  const double top_value = NiceTop(end);
  const double height = top + lane_h * lanes.size() + 40, width = left + plot_w + right;
  auto px = [&](double ms) { return left + plot_w * ms / top_value; };
  std::string out = SvgOpen(width, height, title);
  const double bottom = top + lane_h * lanes.size();
  for (int t = 0; t <= 5; ++t) {
    const double ms = top_value * t / 5;
    absl::StrAppendFormat(&out,
                          "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' class='grid'/>"
                          "<text x='%.1f' y='%.1f' class='tick' text-anchor='middle'>%s ms</text>",
                          px(ms), top, px(ms), bottom, px(ms), bottom + 16, Number(ms));
  }
  for (size_t i = 0; i < lanes.size(); ++i) {
    const double y = top + lane_h * i;
    absl::StrAppendFormat(&out, "<text x='%.1f' y='%.1f' class='tick' text-anchor='end'>%s</text>",
                          left - 8, y + 15, HtmlEscape(lanes[i].name));
    for (const GanttSpan& s : lanes[i].spans) {
      absl::StrAppendFormat(&out,
                            "<rect x='%.2f' y='%.1f' width='%.2f' height='%.1f' fill='%s'>"
                            "<title>%s: %s - %s ms</title></rect>",
                            px(s.start_ms), y + 3, std::max(px(s.end_ms) - px(s.start_ms), 0.5),
                            lane_h - 6, Color(s.color), HtmlEscape(s.label), Number(s.start_ms),
                            Number(s.end_ms));
    }
  }
  return out + "</svg>";
}

std::string HtmlPage(const std::string& title, const std::string& subtitle,
                     const std::vector<HtmlSection>& sections) {
  std::string out = absl::StrCat(
      "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>", HtmlEscape(title),
      "</title><style>"
      "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#222}"
      "h1{font-size:20px;margin:0 0 4px}p.sub{color:#555;margin:0 0 16px}"
      "h2{font-size:16px;margin:24px 0 8px}section{overflow-x:auto}"
      "svg .title{font-size:14px;font-weight:600}svg .tick{font-size:11px;fill:#444}"
      "svg .axis{font-size:12px;fill:#222}svg .legend{font-size:12px;fill:#222}"
      "svg .grid{stroke:#ddd;stroke-width:1}"
      "</style></head><body>\n<h1>", HtmlEscape(title), "</h1>\n<p class='sub'>",
      HtmlEscape(subtitle), "</p>\n");
  for (const HtmlSection& s : sections) {
    absl::StrAppend(&out, "<section><h2>", HtmlEscape(s.heading), "</h2>\n", s.body,
                    "\n</section>\n");
  }
  return out + "</body></html>\n";
}

}  // namespace overlap::client
