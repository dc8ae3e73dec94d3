#include "common/yaml_util.h"

#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/spec_prescan.h"
#include "common/status_macros.h"
#include "yaml-cpp/eventhandler.h"

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

// Builds the tree of one document from the parser's events, within limits.
//
// Why not YAML::Load or LoadAll: yaml-cpp 0.7 answers a token that no rule
// takes at the top of a document (a `,` or `]` outside any flow collection)
// with an empty document and leaves the token where it was, so the next
// document starts at the same token. LoadAll loops on such documents forever,
// appending each to its vector: `,"` alone ran a daemon out of memory. Its
// tree builder also lets an alias repeat a subtree, and nothing bounds the
// nesting or the number of nodes. LoadDocument drives yaml-cpp's Parser
// itself, one document and a look at the next, and this builder throws (as
// yaml-cpp does, with where) at the first anchor, alias, or limit passed.
class TreeBuilder final : public YAML::EventHandler {
 public:
  explicit TreeBuilder(const YamlLimits& limits) : limits_(limits) {}

  const YAML::Mark& start() const { return start_; }
  const YAML::Node& root() const { return root_; }

  void OnDocumentStart(const YAML::Mark& mark) override { start_ = mark; }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    Add(mark, anchor, YAML::Node(YAML::NodeType::Null));
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    throw YAML::ParserException(mark, "aliases (*name) are not accepted");
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    CheckTag(mark, tag);
    YAML::Node node(value);
    node.SetTag(tag);  // "!" when quoted: ReadInt64 and others tell "12" from 12
    Add(mark, anchor, node);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value style) override {
    Open(mark, anchor, YAML::NodeType::Sequence, tag, style);
  }
  void OnSequenceEnd() override { Close(); }

  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value style) override {
    Open(mark, anchor, YAML::NodeType::Map, tag, style);
  }
  void OnMapEnd() override { Close(); }

 private:
  struct Open_ {
    YAML::Node node;
    std::optional<YAML::Node> key;  // a mapping's key that waits for its value
  };

  // yaml-cpp gives "?" for a plain value and "!" for a quoted one; anything
  // else was written as a tag, which the pre-scan refuses first.
  static void CheckTag(const YAML::Mark& mark, const std::string& tag) {
    if (!tag.empty() && tag != "?" && tag != "!") {
      throw YAML::ParserException(mark, "tags (!name, !!type, !<uri>) are not accepted");
    }
  }

  void Count(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (anchor != YAML::NullAnchor) {
      throw YAML::ParserException(mark, "anchors (&name) are not accepted");
    }
    if (++nodes_ > limits_.max_nodes) {
      throw YAML::ParserException(
          mark, absl::StrCat("more than ", limits_.max_nodes, " values in one document"));
    }
  }

  void Add(const YAML::Mark& mark, YAML::anchor_t anchor, const YAML::Node& node) {
    Count(mark, anchor);
    Attach(node);
  }

  void Open(const YAML::Mark& mark, YAML::anchor_t anchor, YAML::NodeType::value type,
            const std::string& tag, YAML::EmitterStyle::value style) {
    CheckTag(mark, tag);
    Count(mark, anchor);
    if (static_cast<int>(open_.size()) >= limits_.max_depth) {
      throw YAML::ParserException(
          mark, absl::StrCat("lists and mappings nested more than ", limits_.max_depth,
                             " deep"));
    }
    YAML::Node node(type);
    node.SetTag(tag);
    node.SetStyle(style);
    open_.push_back(Open_{node, std::nullopt});
  }

  void Close() {
    YAML::Node done = open_.back().node;
    open_.pop_back();
    Attach(done);
  }

  void Attach(const YAML::Node& node) {
    if (open_.empty()) {
      root_ = node;
      return;
    }
    Open_& parent = open_.back();
    if (parent.node.IsSequence()) {
      parent.node.push_back(node);
    } else if (!parent.key) {
      parent.key = node;
    } else {
      // As yaml-cpp's own builder does: keys are kept as written, in order.
      parent.node.force_insert(*parent.key, node);
      parent.key.reset();
    }
  }

  const YamlLimits limits_;
  YAML::Mark start_;
  YAML::Node root_;
  std::vector<Open_> open_;
  int64_t nodes_ = 0;
};

// What to say of the token yaml-cpp stopped at without taking it.
std::string StuckTokenMessage(absl::string_view text, const YAML::Mark& mark) {
  size_t pos = mark.pos >= 0 ? static_cast<size_t>(mark.pos) : text.size();
  while (pos < text.size() && absl::ascii_isspace(static_cast<unsigned char>(text[pos]))) ++pos;
  if (pos >= text.size()) return "unexpected text";
  return absl::StrCat("unexpected '", absl::CHexEscape(text.substr(pos, 1)),
                      "' where a value was expected");
}

// The text's size and the pre-scan: what the parse will hold, or why it is
// refused before yaml-cpp sees anything.
absl::StatusOr<PrescanFacts> Prescan(absl::string_view text, const std::string& prefix,
                                     const YamlLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "YAML/JSON text of ", text.size(),
                                                   " bytes, over the ", limits.max_bytes,
                                                   " bytes taken"));
  }
  PrescanLimits prescan_limits;
  prescan_limits.max_depth = limits.max_depth;
  prescan_limits.max_nodes = limits.max_nodes;
  absl::StatusOr<PrescanFacts> facts = PrescanYaml(text, prescan_limits);
  if (!facts.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, facts.status().message()));
  }
  return facts;
}

absl::StatusOr<YAML::Node> Parse(absl::string_view text, const std::string& prefix,
                                 const YamlLimits& limits) {
  std::istringstream stream{std::string(text)};
  try {
    YAML::Parser parser(stream);
    TreeBuilder first(limits);
    if (!parser.HandleNextDocument(first)) return YAML::Node();
    // One more call tells a second document (refused: what follows a `---`
    // would otherwise be dropped without a word) from the end of the text.
    // A document that begins where the one before it began is the token
    // yaml-cpp could not take, met again (see TreeBuilder): at most three
    // calls tell it from a real second document.
    TreeBuilder second(limits);
    if (parser.HandleNextDocument(second)) {
      const YAML::Mark* stuck = nullptr;
      if (second.start().pos == first.start().pos) {
        stuck = &first.start();
      } else if (second.root().IsNull()) {
        TreeBuilder third(limits);
        if (parser.HandleNextDocument(third) && third.start().pos == second.start().pos) {
          stuck = &second.start();
        }
      }
      if (stuck != nullptr) {
        throw YAML::ParserException(*stuck, StuckTokenMessage(text, *stuck));
      }
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, "holds more than one YAML document (separated by ---); it must hold one"));
    }
    return first.root();
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

}  // namespace

absl::StatusOr<YAML::Node> LoadDocument(absl::string_view text, absl::string_view source_name,
                                        const YamlLimits& limits) {
  const std::string prefix = source_name.empty() ? "" : absl::StrCat(source_name, ": ");
  RETURN_IF_ERROR(Prescan(text, prefix, limits).status());
  return Parse(text, prefix, limits);
}

absl::StatusOr<BudgetedDocument> LoadBudgetedDocument(absl::string_view text,
                                                      absl::string_view source_name,
                                                      const YamlLimits& limits,
                                                      ParseBudget& budget) {
  const std::string prefix = source_name.empty() ? "" : absl::StrCat(source_name, ": ");
  ASSIGN_OR_RETURN(const PrescanFacts facts, Prescan(text, prefix, limits));
  BudgetedDocument document;
  ASSIGN_OR_RETURN(document.grant,
                   budget.Acquire(EstimatedParseBytes(static_cast<int64_t>(text.size()), facts)));
  ASSIGN_OR_RETURN(document.root, Parse(text, prefix, limits));
  return document;
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
