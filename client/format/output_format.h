// The global `-o, --output FORMAT` choice (kubectl's): the table by default,
// json (what --json prints), yaml (the same document as YAML), wide (tables
// with every column) or name (the job or session ids, one a line).
//
// yaml and name are made from the JSON a command prints: JsonDocumentBuffer
// collects standard output and hands on each JSON document as soon as it is
// whole, so that a stream (top's one object a line) is converted as it comes.
// Not thread-safe.
#pragma once

#include <functional>
#include <ostream>
#include <streambuf>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace overlap::client {

enum class OutputFormat { kTable, kJson, kYaml, kWide, kName };

// "" is the table. INVALID_ARGUMENT for any other word, naming the formats
// and --output-file (where graph, pin, timeline, calibrate and export write a
// file), since a path after -o means a file was wanted.
absl::StatusOr<OutputFormat> ParseOutputFormat(const std::string& text);

// `doc` as a YAML document (block style; strings that YAML would read as
// something else are quoted), ending in a newline.
std::string JsonToYaml(const nlohmann::json& doc);

// The ids in a command's JSON: its "id" (a job), each "id" of its "jobs" (a
// list), or each "session_id" of its "sessions"; none for anything else. A
// job spanning daemons is named by its "global_id", and a list leaves out the
// parts of jobs it holds the coordinator's job of, as its table does.
std::vector<std::string> JobNames(const nlohmann::json& doc);

// A stream buffer that collects text and, at each line end where the text so
// far is one whole JSON document, hands it to `emit` and starts again. At
// Flush, text that never became JSON is passed on to `passthrough` as it is.
class JsonDocumentBuffer : public std::streambuf {
 public:
  JsonDocumentBuffer(std::function<void(const nlohmann::json&)> emit, std::ostream& passthrough)
      : emit_(std::move(emit)), passthrough_(passthrough) {}
  void Flush();

 protected:
  int_type overflow(int_type c) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;

 private:
  void TakeLineEnd();

  std::function<void(const nlohmann::json&)> emit_;
  std::ostream& passthrough_;
  std::string pending_;
  int depth_ = 0;  // open brackets in pending_, outside strings
  bool in_string_ = false;
  bool escaped_ = false;
};

// Where a command writes its standard output under -o: `out` itself (table,
// json, wide), or a stream whose JSON documents are converted as they come
// (yaml: "---" between documents; name: each document's JobNames).
class CommandOutput {
 public:
  CommandOutput(OutputFormat format, std::ostream& out);
  std::ostream& stream() { return converted_ ? converting_ : out_; }
  // Whether the command must print JSON: json, yaml and name are made from it.
  bool wants_json() const {
    return format_ != OutputFormat::kTable && format_ != OutputFormat::kWide;
  }
  // Converts what is left; call once the command has returned.
  void Finish();

 private:
  void Emit(const nlohmann::json& doc);

  OutputFormat format_;
  std::ostream& out_;
  bool converted_;
  int documents_ = 0;
  JsonDocumentBuffer buffer_;
  std::ostream converting_;
};

}  // namespace overlap::client
