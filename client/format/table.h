// A plain-text table with aligned columns, as printed by overlapctl. Pure
// formatting, no I/O; not thread-safe (build one per output).
//
// Tables fit the terminal they are printed on (ChooseTableWidth; SetTableWidth(0)
// for `--wide` and for output that is no terminal): where a table is wider, its
// detail columns go, the highest `detail` rank first, and a line under it names
// them. Cells are padded by the width they show on a terminal (UTF-8: a CJK
// character takes two columns, a combining mark none), not by their bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace overlap::client {

enum class Align { kLeft, kRight };

// The width tables fit on a terminal whose width is unknown, and what --wide
// sets (0 = no limit).
inline constexpr size_t kDefaultTableWidth = 120;
void SetTableWidth(size_t columns);
size_t TableWidth();
// Whether -o wide (or --wide) was asked for: tables then add the note lines
// that hold what their one-word cells shorten (a list's whole reasons).
// Output that is merely no terminal is uncut but not wide.
void SetWideOutput(bool wide);
bool WideOutput();

// The width to fit: 0 (every column) when standard output is no terminal, so
// that a pipe or a file gets whole rows; on one, `columns_env` ($COLUMNS, may
// be null) when it is a positive number, else `terminal_columns` when known
// (not 0), else kDefaultTableWidth.
size_t ChooseTableWidth(bool stdout_is_terminal, const char* columns_env, size_t terminal_columns);

// Terminal columns `text` (UTF-8) takes; a byte that is not UTF-8 counts one.
size_t DisplayWidth(const std::string& text);

class TextTable {
 public:
  struct Column {
    std::string title;
    Align align = Align::kLeft;
    // 0: always shown. Otherwise dropped, highest first, to fit TableWidth().
    int detail = 0;
  };

  explicit TextTable(std::vector<Column> columns);

  // A row with one cell per column; missing trailing cells print empty, extra
  // cells are dropped.
  void AddRow(std::vector<std::string> cells);
  // A dashed line under the columns at this position (e.g. above a total row).
  void AddSeparator();

  // Columns separated by two spaces; a dashed line under the titles; no trailing
  // spaces on any line; every line ends with '\n'.
  std::string Render() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;  // an empty row is a separator
};

// A table's columns in runs: words left-aligned, figures right-aligned (so
// that their digits line up), each run with one `detail` rank (0: always
// shown), e.g. TextTable t(Columns({Words({"op"}), Figures({"step ms", "hidden %"})})).
std::vector<TextTable::Column> Words(std::initializer_list<std::string> titles, int detail = 0);
std::vector<TextTable::Column> Figures(std::initializer_list<std::string> titles, int detail = 0);
std::vector<TextTable::Column> Columns(std::initializer_list<std::vector<TextTable::Column>> runs);

// Cells of the tables scripts read (node, top, list, tuning) are one word each, so that awk
// splits the columns: BytesCell is FormatBytes without its space ("2.00GiB", "0B"); WordCell
// joins the words of `text` with '_' ("autotune round 1/2" -> "autotune_round_1/2").
std::string BytesCell(int64_t bytes);
std::string WordCell(const std::string& text);

}  // namespace overlap::client
