#include "client/format/table.h"

#include <algorithm>
#include <utility>

namespace overlap::client {
namespace {

constexpr char kGap[] = "  ";

std::string Pad(const std::string& text, size_t width, Align align) {
  if (text.size() >= width) return text;
  std::string fill(width - text.size(), ' ');
  return align == Align::kLeft ? text + fill : fill + text;
}

void TrimRight(std::string& line) {
  while (!line.empty() && line.back() == ' ') line.pop_back();
}

}  // namespace

TextTable::TextTable(std::vector<Column> columns) : columns_(std::move(columns)) {}

void TextTable::AddRow(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  // A real row is never empty; keep separators distinguishable.
  if (cells.empty()) return;
  rows_.push_back(std::move(cells));
}

void TextTable::AddSeparator() { rows_.emplace_back(); }

std::string TextTable::Render() const {
  std::vector<size_t> widths(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) {
    widths[c] = columns_[c].title.size();
    for (const auto& row : rows_) {
      if (!row.empty()) widths[c] = std::max(widths[c], row[c].size());
    }
  }
  size_t total = 0;
  for (size_t c = 0; c < widths.size(); ++c) total += widths[c] + (c ? 2 : 0);

  std::string out;
  auto emit = [&](const std::vector<std::string>& cells, bool titles) {
    std::string line;
    for (size_t c = 0; c < columns_.size(); ++c) {
      if (c) line += kGap;
      line += Pad(titles ? columns_[c].title : cells[c], widths[c], columns_[c].align);
    }
    TrimRight(line);
    out += line + "\n";
  };
  const std::string rule = std::string(total, '-') + "\n";
  std::vector<std::string> none;
  emit(none, /*titles=*/true);
  out += rule;
  for (const auto& row : rows_) {
    if (row.empty()) {
      out += rule;
    } else {
      emit(row, /*titles=*/false);
    }
  }
  return out;
}

}  // namespace overlap::client
