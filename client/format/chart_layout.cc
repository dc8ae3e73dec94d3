#include "client/format/chart_layout.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace overlap::client {

std::string AxisTicks::Label(int i) const { return absl::StrFormat("%.*f", decimals, Value(i)); }

AxisTicks NiceTicks(double most, int max_intervals) {
  if (!(most > 0) || !std::isfinite(most)) most = 1;
  max_intervals = std::max(max_intervals, 1);
  const double raw = most / max_intervals;
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  AxisTicks ticks;
  ticks.step = 10 * magnitude;
  for (double m : {1.0, 2.0, 5.0}) {
    // The tolerance keeps 0.3 / 3 from reading as a hair above 0.1.
    if (m * magnitude >= raw * (1 - 1e-9)) {
      ticks.step = m * magnitude;
      break;
    }
  }
  ticks.intervals = std::max(1, static_cast<int>(std::ceil(most / ticks.step - 1e-9)));
  ticks.decimals = std::max(0, static_cast<int>(-std::floor(std::log10(ticks.step) + 1e-9)));
  return ticks;
}

double TextWidth(const std::string& text, double font_px) {
  double em = 0;
  for (unsigned char c : text) {
    if ((c & 0xC0) == 0x80) continue;  // a UTF-8 continuation byte
    if (c == ' ' || c == '.' || c == ',' || c == ':' || c == 'i' || c == 'l' || c == '|') {
      em += 0.35;
    } else if ((c >= 'A' && c <= 'Z') || c == 'm' || c == 'w' || c == '%' || c >= 0x80) {
      em += 0.8;
    } else {
      em += 0.62;
    }
  }
  return em * font_px;
}

std::vector<std::string> WrapWords(const std::string& text, double max_px, double font_px) {
  std::vector<std::string> lines;
  std::string line;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    const std::string longer = line.empty() ? std::string(word) : line + " " + std::string(word);
    if (!line.empty() && TextWidth(longer, font_px) > max_px) {
      lines.push_back(line);
      line = std::string(word);
    } else {
      line = longer;
    }
  }
  if (!line.empty() || lines.empty()) lines.push_back(line);
  return lines;
}

std::vector<LegendSlot> LayOutLegend(const std::vector<std::string>& names, double max_width) {
  std::vector<LegendSlot> slots;
  double x = 0;
  int row = 0;
  for (const std::string& name : names) {
    const double width = kSwatchPx + 6 + TextWidth(name, kLegendFontPx);
    if (x > 0 && x + width > max_width) {
      x = 0;
      ++row;
    }
    slots.push_back({x, row});
    x += width + 22;
  }
  return slots;
}

}  // namespace overlap::client
