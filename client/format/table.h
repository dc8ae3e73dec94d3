// A plain-text table with aligned columns, as printed by overlapctl. Pure
// formatting, no I/O; not thread-safe (build one per output).
#pragma once

#include <string>
#include <vector>

namespace overlap::client {

enum class Align { kLeft, kRight };

class TextTable {
 public:
  struct Column {
    std::string title;
    Align align = Align::kLeft;
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

}  // namespace overlap::client
