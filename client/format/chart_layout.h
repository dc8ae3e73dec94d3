// The arithmetic behind the SVG charts (html_chart.h): axis ticks at even
// 1-2-5 steps, text widths estimated without a font, words wrapped to a width,
// and a legend laid out in rows. Pure functions, no I/O.
#pragma once

#include <string>
#include <vector>

namespace overlap::client {

// Ticks from 0 to Top() in `intervals` steps of 1, 2 or 5 times a power of
// ten, every label printed with the same number of decimals ("0.0, 0.5, 1.0",
// never "0.5" beside "1.00").
struct AxisTicks {
  double step = 1;
  int intervals = 1;
  int decimals = 0;

  double Top() const { return step * intervals; }
  double Value(int i) const { return step * i; }
  std::string Label(int i) const;
};

// The fewest-decimal ticks covering [0, most] in at most `max_intervals`
// steps; `most` <= 0 (or NaN) gives 0..1.
AxisTicks NiceTicks(double most, int max_intervals = 5);

// A generous estimate of the width `text` takes at `font_px` in a sans-serif
// face (DejaVu Sans, the widest of the common ones, averages ~0.6 em): room
// reserved from it never clips. UTF-8 continuation bytes take no width.
double TextWidth(const std::string& text, double font_px);

// `text` broken at spaces into lines of at most `max_px` each (a word longer
// than that gets a line of its own).
std::vector<std::string> WrapWords(const std::string& text, double max_px, double font_px);

// Where each legend entry goes: rows of swatch-and-name pairs, left to right,
// a new row where the next one would pass `max_width`.
struct LegendSlot {
  double x = 0;  // the swatch's left edge, from the legend's left
  int row = 0;
};
inline constexpr double kLegendFontPx = 12;
inline constexpr double kLegendRowPx = 18;
inline constexpr double kSwatchPx = 12;
std::vector<LegendSlot> LayOutLegend(const std::vector<std::string>& names, double max_width);

}  // namespace overlap::client
