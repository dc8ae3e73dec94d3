#include "client/format/output_format.h"

#include <cctype>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "yaml-cpp/yaml.h"

namespace overlap::client {
namespace {

// A plain YAML scalar that a reader would take for a number, a bool or null.
bool NeedsQuotes(const std::string& text) {
  if (text.empty()) return true;
  const std::string lower = absl::AsciiStrToLower(text);
  for (const char* word : {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "~"}) {
    if (lower == word) return true;
  }
  double number = 0;
  return absl::SimpleAtod(text, &number) || std::isspace(static_cast<unsigned char>(text[0]));
}

void Emit(const nlohmann::json& value, YAML::Emitter& out) {
  switch (value.type()) {
    case nlohmann::json::value_t::object:
      if (value.empty()) out << YAML::Flow;  // "{}" beside its key
      out << YAML::BeginMap;
      for (const auto& [key, item] : value.items()) {
        out << YAML::Key << key << YAML::Value;
        Emit(item, out);
      }
      out << YAML::EndMap;
      return;
    case nlohmann::json::value_t::array:
      if (value.empty()) out << YAML::Flow;  // "[]"
      out << YAML::BeginSeq;
      for (const nlohmann::json& item : value) Emit(item, out);
      out << YAML::EndSeq;
      return;
    case nlohmann::json::value_t::string: {
      const std::string& text = value.get_ref<const std::string&>();
      if (NeedsQuotes(text)) out << YAML::DoubleQuoted;
      out << text;
      return;
    }
    case nlohmann::json::value_t::null:
      out << YAML::Null;
      return;
    default:  // numbers and bools as JSON writes them, which YAML reads alike
      out << value.dump();
      return;
  }
}

// `field` of a JSON object where it is a string, else "".
std::string StringField(const nlohmann::json& object, const char* field) {
  if (!object.is_object()) return "";
  const auto it = object.find(field);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

// A job's name under -o name: its global id where it spans daemons (the id
// that names it on every node of it), else its id.
std::string NameOf(const nlohmann::json& job) {
  const std::string global_id = StringField(job, "global_id");
  return global_id.empty() ? StringField(job, "id") : global_id;
}

// A job spanning daemons as its coordinator holds it (not one of its parts).
bool IsCoordinatorsJob(const nlohmann::json& job) {
  return !StringField(job, "global_id").empty() && StringField(job, "coordinator").empty();
}

}  // namespace

absl::StatusOr<OutputFormat> ParseOutputFormat(const std::string& text) {
  if (text.empty()) return OutputFormat::kTable;
  if (text == "json") return OutputFormat::kJson;
  if (text == "yaml") return OutputFormat::kYaml;
  if (text == "wide") return OutputFormat::kWide;
  if (text == "name") return OutputFormat::kName;
  return absl::InvalidArgumentError(
      absl::StrCat("-o/--output takes a format: json, yaml, wide or name, not \"", text,
                   "\"; to write a file (graph, pin, timeline, calibrate, export), use "
                   "--output-file ",
                   text));
}

std::string JsonToYaml(const nlohmann::json& doc) {
  YAML::Emitter out;
  Emit(doc, out);
  return std::string(out.c_str()) + "\n";
}

std::vector<std::string> JobNames(const nlohmann::json& doc) {
  std::vector<std::string> names;
  auto add = [&names](const nlohmann::json& job) {
    if (job.is_object() && job.contains("id") && job["id"].is_string()) {
      names.push_back(NameOf(job));
    }
  };
  add(doc);
  if (doc.is_object() && doc.contains("jobs") && doc["jobs"].is_array()) {
    // As the list's table: a part of a job that this node coordinates is the
    // coordinator's row, not one of its own (both carry the same global id).
    std::set<std::string> coordinated;
    for (const nlohmann::json& job : doc["jobs"]) {
      if (IsCoordinatorsJob(job)) coordinated.insert(NameOf(job));
    }
    for (const nlohmann::json& job : doc["jobs"]) {
      if (!IsCoordinatorsJob(job) && coordinated.count(NameOf(job)) > 0) continue;
      add(job);
    }
  }
  // overlapctl sessions: each session's id.
  if (doc.is_object() && doc.contains("sessions") && doc["sessions"].is_array()) {
    for (const nlohmann::json& session : doc["sessions"]) {
      if (session.is_object() && session.contains("session_id") &&
          session["session_id"].is_string()) {
        names.push_back(session["session_id"].get<std::string>());
      }
    }
  }
  return names;
}

void JsonDocumentBuffer::TakeLineEnd() {
  nlohmann::json doc = nlohmann::json::parse(pending_, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return;  // not whole yet
  pending_.clear();
  depth_ = 0;
  emit_(doc);
}

JsonDocumentBuffer::int_type JsonDocumentBuffer::overflow(int_type c) {
  if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
  const char ch = traits_type::to_char_type(c);
  pending_.push_back(ch);
  // Brackets are counted outside strings, so that a document is parsed once,
  // when it may be whole, not at every line of it.
  if (in_string_) {
    if (escaped_) {
      escaped_ = false;
    } else if (ch == '\\') {
      escaped_ = true;
    } else if (ch == '"') {
      in_string_ = false;
    }
  } else if (ch == '"') {
    in_string_ = true;
  } else if (ch == '{' || ch == '[') {
    ++depth_;
  } else if (ch == '}' || ch == ']') {
    --depth_;
  } else if (ch == '\n' && depth_ <= 0) {
    TakeLineEnd();
  }
  return c;
}

std::streamsize JsonDocumentBuffer::xsputn(const char* s, std::streamsize n) {
  for (std::streamsize i = 0; i < n; ++i) overflow(traits_type::to_int_type(s[i]));
  return n;
}

void JsonDocumentBuffer::Flush() {
  if (pending_.find_first_not_of(" \t\r\n") == std::string::npos) {
    pending_.clear();
    return;
  }
  TakeLineEnd();
  passthrough_ << pending_;
  pending_.clear();
}

CommandOutput::CommandOutput(OutputFormat format, std::ostream& out)
    : format_(format),
      out_(out),
      converted_(format == OutputFormat::kYaml || format == OutputFormat::kName),
      buffer_([this](const nlohmann::json& doc) { Emit(doc); }, out),
      converting_(&buffer_) {}

void CommandOutput::Emit(const nlohmann::json& doc) {
  if (format_ == OutputFormat::kYaml) {
    out_ << (documents_++ > 0 ? "---\n" : "") << JsonToYaml(doc);
  } else {
    for (const std::string& name : JobNames(doc)) out_ << name << "\n";
  }
  out_.flush();  // a stream (top) shows each document as it comes
}

void CommandOutput::Finish() {
  converting_.flush();
  buffer_.Flush();
  out_.flush();
}

}  // namespace overlap::client
