#include "common/yaml_util.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace overlap {
namespace yaml_util {
namespace {

// yaml-cpp tags quoted scalars "!" and plain ones "?" (or an explicit tag).
bool IsQuoted(const YAML::Node& node) { return node.Tag() == "!"; }

bool IsDecimalInteger(absl::string_view text) {
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) text.remove_prefix(1);
  if (text.empty()) return false;
  for (char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

std::string IntegerKind(int64_t min) {
  if (min == 1) return "a positive integer";
  if (min == 0) return "a non-negative integer";
  if (min <= std::numeric_limits<int32_t>::min()) return "an integer";
  return absl::StrCat("an integer >= ", min);
}

}  // namespace

absl::StatusOr<YAML::Node> LoadDocument(absl::string_view text, absl::string_view source_name) {
  const std::string prefix = source_name.empty() ? "" : absl::StrCat(source_name, ": ");
  try {
    std::vector<YAML::Node> documents = YAML::LoadAll(std::string(text));
    if (documents.empty()) return YAML::Node();
    if (documents.size() > 1) {
      // What follows a `---` would otherwise be dropped without a word.
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "holds ", documents.size(),
                       " YAML documents (separated by ---); it must hold one"));
    }
    return documents.front();
  } catch (const YAML::ParserException& e) {
    std::string where;
    if (e.mark.line >= 0) {
      where = absl::StrCat(" at line ", e.mark.line + 1, ", column ", e.mark.column + 1);
    }
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "malformed YAML/JSON", where, ": ", e.msg));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "malformed YAML/JSON: ", e.what()));
  }
}

absl::Status FieldError(absl::string_view path, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", message));
}

std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return "null";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar:
      break;
  }
  constexpr size_t kMaxShown = 40;
  std::string text = node.Scalar();
  const bool truncated = text.size() > kMaxShown;
  if (truncated) text.resize(kMaxShown);
  return absl::StrCat("\"", absl::CHexEscape(text), truncated ? "...\"" : "\"");
}

absl::StatusOr<int64_t> ReadInt64(const YAML::Node& node, int64_t min, int64_t max) {
  const std::string expected = absl::StrCat("must be ", IntegerKind(min));
  if (!node.IsScalar() || IsQuoted(node) || !IsDecimalInteger(node.Scalar())) {
    return absl::InvalidArgumentError(absl::StrCat(expected, " (got ", Describe(node), ")"));
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(node.Scalar(), &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(expected, " that fits in 64 bits (got ", Describe(node), ")"));
  }
  if (value < min) {
    return absl::InvalidArgumentError(absl::StrCat(expected, " (got ", Describe(node), ")"));
  }
  if (value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("must be at most ", max, " (got ", Describe(node), ")"));
  }
  return value;
}

absl::StatusOr<uint64_t> ReadUint64(const YAML::Node& node) {
  const absl::string_view expected = "must be a non-negative integer";
  if (!node.IsScalar() || IsQuoted(node) || !IsDecimalInteger(node.Scalar()) ||
      node.Scalar()[0] == '-') {
    return absl::InvalidArgumentError(absl::StrCat(expected, " (got ", Describe(node), ")"));
  }
  uint64_t value = 0;
  if (!absl::SimpleAtoi(node.Scalar(), &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(expected, " that fits in 64 bits (got ", Describe(node), ")"));
  }
  return value;
}

absl::StatusOr<bool> ReadBool(const YAML::Node& node) {
  if (node.IsScalar() && !IsQuoted(node)) {
    const std::string lower = absl::AsciiStrToLower(node.Scalar());
    if (lower == "true") return true;
    if (lower == "false") return false;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("must be true or false (got ", Describe(node), ")"));
}

absl::StatusOr<std::string> ReadString(const YAML::Node& node) {
  if (!node.IsScalar()) {
    return absl::InvalidArgumentError(absl::StrCat("must be a string (got ", Describe(node), ")"));
  }
  return node.Scalar();
}

absl::StatusOr<double> ReadDouble(const YAML::Node& node, bool allow_zero) {
  double value = 0;
  const absl::string_view expected =
      allow_zero ? "must be a non-negative number" : "must be a positive number";
  if (!node.IsScalar() || IsQuoted(node) || !absl::SimpleAtod(node.Scalar(), &value) ||
      !std::isfinite(value) || value < 0 || (value == 0 && !allow_zero)) {
    return absl::InvalidArgumentError(absl::StrCat(expected, " (got ", Describe(node), ")"));
  }
  return value;
}

}  // namespace yaml_util
}  // namespace overlap
