#include "client/format/table.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/byte_size.h"

namespace overlap::client {
namespace {

constexpr char kGap[] = "  ";

std::atomic<size_t>& Width() {
  static std::atomic<size_t> width{kDefaultTableWidth};
  return width;
}

std::atomic<bool>& Wide() {
  static std::atomic<bool> wide{false};
  return wide;
}

// Terminal columns of one code point: 0 for combining marks and zero-width
// characters, 2 for East Asian wide and fullwidth ones and emoji, else 1.
int CodePointWidth(uint32_t c) {
  if ((c >= 0x0300 && c <= 0x036F) || (c >= 0x200B && c <= 0x200F) ||
      (c >= 0x20D0 && c <= 0x20FF) || (c >= 0xFE00 && c <= 0xFE0F) || c == 0xFEFF) {
    return 0;
  }
  if ((c >= 0x1100 && c <= 0x115F) || (c >= 0x2E80 && c <= 0xA4CF) ||
      (c >= 0xAC00 && c <= 0xD7A3) || (c >= 0xF900 && c <= 0xFAFF) ||
      (c >= 0xFE30 && c <= 0xFE4F) || (c >= 0xFF00 && c <= 0xFF60) ||
      (c >= 0xFFE0 && c <= 0xFFE6) || (c >= 0x1F300 && c <= 0x1F64F) ||
      (c >= 0x1F900 && c <= 0x1F9FF) || (c >= 0x20000 && c <= 0x3FFFD)) {
    return 2;
  }
  return 1;
}

std::string Pad(const std::string& text, size_t width, Align align) {
  const size_t shown = DisplayWidth(text);
  if (shown >= width) return text;
  std::string fill(width - shown, ' ');
  return align == Align::kLeft ? text + fill : fill + text;
}

void TrimRight(std::string& line) {
  while (!line.empty() && line.back() == ' ') line.pop_back();
}

}  // namespace

void SetTableWidth(size_t columns) { Width().store(columns); }
size_t TableWidth() { return Width().load(); }
void SetWideOutput(bool wide) { Wide().store(wide); }
bool WideOutput() { return Wide().load(); }

size_t ChooseTableWidth(bool stdout_is_terminal, const char* columns_env, size_t terminal_columns) {
  if (!stdout_is_terminal) return 0;
  size_t columns = 0;
  if (columns_env != nullptr && absl::SimpleAtoi(columns_env, &columns) && columns > 0) {
    return columns;
  }
  return terminal_columns > 0 ? terminal_columns : kDefaultTableWidth;
}

size_t DisplayWidth(const std::string& text) {
  size_t width = 0;
  for (size_t i = 0; i < text.size();) {
    const unsigned char lead = static_cast<unsigned char>(text[i]);
    const size_t length = lead < 0x80           ? 1
                          : (lead >> 5) == 0x6  ? 2
                          : (lead >> 4) == 0xE  ? 3
                          : (lead >> 3) == 0x1E ? 4
                                                : 0;
    bool valid = length > 0 && i + length <= text.size();
    uint32_t code = length == 1 ? lead : lead & (0x3F >> (length - 1));
    for (size_t k = 1; valid && k < length; ++k) {
      const unsigned char next = static_cast<unsigned char>(text[i + k]);
      valid = (next & 0xC0) == 0x80;
      code = (code << 6) | (next & 0x3F);
    }
    if (!valid) {  // not UTF-8: one column per byte
      width += 1;
      i += 1;
      continue;
    }
    width += CodePointWidth(code);
    i += length;
  }
  return width;
}

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
    widths[c] = DisplayWidth(columns_[c].title);
    for (const auto& row : rows_) {
      if (!row.empty()) widths[c] = std::max(widths[c], DisplayWidth(row[c]));
    }
  }
  // The columns shown: all, less the detail ones (highest rank first) while the
  // table is wider than the output.
  std::vector<bool> shown(columns_.size(), true);
  auto total = [&] {
    size_t sum = 0, count = 0;
    for (size_t c = 0; c < widths.size(); ++c) {
      if (shown[c]) sum += widths[c] + (count++ ? 2 : 0);
    }
    return sum;
  };
  const size_t limit = TableWidth();
  while (limit > 0 && total() > limit) {
    int drop = -1;
    for (size_t c = 0; c < columns_.size(); ++c) {
      if (shown[c] && columns_[c].detail > 0 &&
          (drop < 0 || columns_[c].detail >= columns_[drop].detail)) {
        drop = static_cast<int>(c);
      }
    }
    if (drop < 0) break;  // only essential columns left: wider it is
    shown[drop] = false;
  }
  std::vector<std::string> hidden;
  for (size_t c = 0; c < columns_.size(); ++c) {
    if (!shown[c]) hidden.push_back(columns_[c].title);
  }

  std::string out;
  auto emit = [&](const std::vector<std::string>& cells, bool titles) {
    std::string line;
    bool first = true;
    for (size_t c = 0; c < columns_.size(); ++c) {
      if (!shown[c]) continue;
      if (!first) line += kGap;
      first = false;
      line += Pad(titles ? columns_[c].title : cells[c], widths[c], columns_[c].align);
    }
    TrimRight(line);
    out += line + "\n";
  };
  const std::string rule = std::string(total(), '-') + "\n";
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
  if (!hidden.empty()) {
    // Essential columns stay even past the width: then the note says so.
    const std::string why = total() <= limit ? absl::StrCat("to fit ", limit, " columns")
                                             : absl::StrCat("narrowing toward ", limit, " columns");
    out += absl::StrCat("(", why, ", not shown: ", absl::StrJoin(hidden, ", "),
                        "; --wide shows every column)\n");
  }
  return out;
}

namespace {

std::vector<TextTable::Column> Run(std::initializer_list<std::string> titles, Align align,
                                   int detail) {
  std::vector<TextTable::Column> columns;
  for (const std::string& title : titles) columns.push_back({title, align, detail});
  return columns;
}

}  // namespace

std::vector<TextTable::Column> Words(std::initializer_list<std::string> titles, int detail) {
  return Run(titles, Align::kLeft, detail);
}

std::vector<TextTable::Column> Figures(std::initializer_list<std::string> titles, int detail) {
  return Run(titles, Align::kRight, detail);
}

std::vector<TextTable::Column> Columns(std::initializer_list<std::vector<TextTable::Column>> runs) {
  std::vector<TextTable::Column> columns;
  for (const std::vector<TextTable::Column>& run : runs) {
    columns.insert(columns.end(), run.begin(), run.end());
  }
  return columns;
}

std::string BytesCell(int64_t bytes) {
  return absl::StrReplaceAll(FormatBytes(bytes), {{" ", ""}});
}

std::string WordCell(const std::string& text) {
  const std::vector<absl::string_view> words =
      absl::StrSplit(text, absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
  return absl::StrJoin(words, "_");
}

}  // namespace overlap::client
