#include "common/spec_prescan.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace overlap {
namespace {

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r'; }
bool IsFlowIndicator(char c) { return c == ',' || c == '[' || c == ']' || c == '{' || c == '}'; }

// One pass over the text, line by line. The rules follow yaml-cpp 0.7's
// scanner where it matters for what is counted: a quote opens a scalar only
// where a token starts; `#` opens a comment after a blank or at a line's
// start; a plain scalar ends, in a flow collection, at `,[]{}` or a `:`
// before a blank or one of them, and in block context at `: ` or a line
// indented no deeper than its collection. Where the two could part (a quoted
// value over several lines, a block scalar), a graph needs neither, and the
// pre-scan refuses it rather than guess: a guess that took structure for text
// would let the nesting it came to stop through.
// What no graph or config needs, where a token starts with `c`: why it is
// refused, or null.
const char* RefusedAtTokenStart(char c, int column, bool flow) {
  switch (c) {
    case '!':
      return "tags (!name, !!type, !<uri>) are not accepted: a value is plain text";
    case '&':
      return "anchors (&name) are not accepted";
    case '*':
      return "aliases (*name) are not accepted";
    case '%':
      return !flow && column == 0 ? "directives (%YAML, %TAG) are not accepted" : nullptr;
    case '|':
    case '>':
      return flow ? nullptr
                  : "block scalars (| and >) are not accepted: write the value on its line";
    default:
      return nullptr;
  }
}

class Prescanner {
 public:
  Prescanner(absl::string_view text, const PrescanLimits& limits) : text_(text), limits_(limits) {}

  absl::StatusOr<PrescanFacts> Run() {
    RETURN_IF_ERROR(CheckBytes());
    size_t begin = text_.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;  // a UTF-8 byte-order mark
    while (true) {
      size_t end = text_.find('\n', begin);
      if (end == absl::string_view::npos) end = text_.size();
      line_begin_ = begin;
      RETURN_IF_ERROR(ScanLine(begin, end));
      if (end == text_.size()) break;
      begin = end + 1;
    }
    return facts_;
  }

 private:
  enum class State { kToken, kPlain, kSingleQuoted, kDoubleQuoted };

  absl::Status Refuse(size_t offset, absl::string_view why) const {
    // The column in characters: UTF-8 continuation bytes do not count.
    const size_t line_begin = text_.rfind('\n', offset == 0 ? 0 : offset - 1);
    const size_t from = line_begin == absl::string_view::npos || offset == 0 ? 0 : line_begin + 1;
    int64_t column = 1;
    for (size_t i = from; i < offset; ++i) column += (text_[i] & 0xC0) != 0x80;
    int64_t line = 1;
    for (size_t i = 0; i < from; ++i) line += text_[i] == '\n';
    return absl::InvalidArgumentError(
        absl::StrCat("YAML/JSON refused at line ", line, ", column ", column, ": ", why));
  }

  // Bytes no text of ours holds; the first is named with its offset.
  absl::Status CheckBytes() const {
    for (size_t i = 0; i < text_.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(text_[i]);
      if (c == 0) {
        return Refuse(i,
                      absl::StrCat("a NUL byte (offset ", i, "): UTF-16/32? specs must be UTF-8"));
      }
      if (c == '\r' && (i + 1 == text_.size() || text_[i + 1] != '\n')) {
        return Refuse(i, absl::StrCat("a carriage return not followed by a newline (offset ", i,
                                      "): lines end in \\n or \\r\\n"));
      }
      // DEL stays: yaml-cpp's emitter writes it as it is (a pinned graph,
      // a config written back), and names refuse it later.
      if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
        return Refuse(i, absl::StrFormat("the control character 0x%02x (offset %d): YAML/JSON "
                                         "text holds none but tab and line ends",
                                         c, i));
      }
    }
    return absl::OkStatus();
  }

  int ParentColumn() const { return block_.empty() ? -1 : block_.back().column; }

  absl::Status CountNode(size_t offset) {
    if (++facts_.nodes > limits_.max_nodes) {
      return Refuse(offset,
                    absl::StrCat("more than ", limits_.max_nodes, " values in one document"));
    }
    return absl::OkStatus();
  }

  absl::Status CheckDepth(size_t offset, int64_t extra = 0) {
    const int64_t depth = static_cast<int64_t>(block_.size()) + flow_depth_ + extra;
    facts_.depth = static_cast<int>(std::max<int64_t>(facts_.depth, depth));
    if (depth > limits_.max_depth) {
      return Refuse(
          offset, absl::StrCat("lists and mappings nested more than ", limits_.max_depth, " deep"));
    }
    return absl::OkStatus();
  }

  // A block mapping's key or a block sequence's `- ` at `column`: a new
  // collection where it is deeper than the one it is in, or a sequence at its
  // mapping's column (`a:` then `- x`: YAML lets it go unindented).
  absl::Status EnterBlock(int column, bool sequence) {
    const size_t offset = line_begin_ + static_cast<size_t>(column);
    while (!block_.empty() &&
           (block_.back().column > column ||
            (block_.back().column == column && block_.back().sequence && !sequence))) {
      block_.pop_back();  // closed; a key at a sequence's column ends the sequence
    }
    if (!block_.empty() && block_.back().column == column && block_.back().sequence == sequence) {
      return absl::OkStatus();
    }
    block_.push_back(BlockCollection{column, sequence});
    RETURN_IF_ERROR(CountNode(offset));
    return CheckDepth(offset);
  }

  bool BlankOrEnd(size_t i, size_t end) const { return i >= end || IsBlank(text_[i]); }

  bool IsDocumentMarker(size_t i, size_t end) const {
    const absl::string_view three = text_.substr(i, 3);
    return i == line_begin_ && (three == "---" || three == "...") && BlankOrEnd(i + 3, end);
  }

  absl::Status ScanLine(size_t begin, size_t end) {
    size_t first = begin;
    while (first < end && text_[first] == ' ') ++first;
    size_t nonblank = first;
    while (nonblank < end && IsBlank(text_[nonblank])) ++nonblank;
    const bool blank = nonblank == end;
    const int indent = static_cast<int>(first - begin);
    if (state_ == State::kSingleQuoted || state_ == State::kDoubleQuoted) {
      return Refuse(quote_begin_,
                    "a quoted value runs past the end of its line: close it on the line "
                    "(a graph's values fit on one)");
    }
    if (state_ == State::kPlain && flow_depth_ == 0 && !blank) {
      // A plain scalar goes on where the line is indented deeper than the
      // collection it is in, and is not a comment or a document marker.
      const bool goes_on =
          text_[nonblank] != '#' && indent > ParentColumn() && !IsDocumentMarker(first, end);
      if (!goes_on) state_ = State::kToken;
    }
    size_t i = begin;
    if (state_ == State::kToken && flow_depth_ == 0 && !blank && text_[nonblank] != '#') {
      if (IsDocumentMarker(first, end)) {
        block_.clear();
        i = first + 3;
      } else {
        while (!block_.empty() && block_.back().column > indent) block_.pop_back();
      }
    }
    prev_blank_ = true;
    for (; i < end; ++i) {
      bool line_done = false;
      RETURN_IF_ERROR(Step(i, end, &line_done));
      if (line_done) break;
    }
    return absl::OkStatus();
  }

  // The character at `i`; may advance `i` past what it takes, and sets
  // *line_done at a comment.
  absl::Status Step(size_t& i, size_t end, bool* line_done) {
    const char c = text_[i];
    switch (state_) {
      case State::kSingleQuoted:
        if (c == '\'') {
          if (i + 1 < end && text_[i + 1] == '\'') {
            ++i;  // '' is a quote inside the value
          } else {
            EndQuoted();
          }
        }
        return absl::OkStatus();
      case State::kDoubleQuoted:
        if (c == '\\') {
          ++i;
        } else if (c == '"') {
          EndQuoted();
        }
        return absl::OkStatus();
      case State::kPlain:
        return StepPlain(i, end, line_done);
      case State::kToken:
        return StepToken(i, end, line_done);
    }
    return absl::OkStatus();
  }

  void NoteToken(int column) {
    token_column_ = column;
    token_line_begin_ = line_begin_;
  }

  void EndQuoted() {
    state_ = State::kToken;
    after_json_key_ = true;  // {"a":1}: a `:` right after it is a value indicator
    prev_blank_ = false;
  }

  absl::Status StepPlain(size_t& i, size_t end, bool* line_done) {
    const char c = text_[i];
    if (c == '#' && prev_blank_) {
      state_ = State::kToken;
      *line_done = true;
      return absl::OkStatus();
    }
    const bool before_blank = BlankOrEnd(i + 1, end);
    if (flow_depth_ > 0) {
      if (IsFlowIndicator(c)) {
        state_ = State::kToken;
        return StepToken(i, end, line_done);
      }
      if (c == ':' && (before_blank || IsFlowIndicator(text_[i + 1]))) {
        state_ = State::kToken;
        after_json_key_ = false;
        prev_blank_ = false;
        return absl::OkStatus();
      }
    } else if (c == ':' && before_blank) {
      state_ = State::kToken;
      prev_blank_ = false;
      return EnterBlock(token_column_, /*sequence=*/false);
    } else if (c == '[' || c == '{') {
      // Text to yaml-cpp; but counted, so that no reading of where this
      // scalar ends can hide nesting from the limit.
      ++plain_brackets_;
      RETURN_IF_ERROR(CheckDepth(i, plain_brackets_));
    } else if ((c == ']' || c == '}') && plain_brackets_ > 0) {
      --plain_brackets_;
    }
    prev_blank_ = IsBlank(c);
    return absl::OkStatus();
  }

  absl::Status StepToken(size_t& i, size_t end, bool* line_done) {
    const char c = text_[i];
    const int column = static_cast<int>(i - line_begin_);
    const bool before_blank = BlankOrEnd(i + 1, end);
    const bool flow = flow_depth_ > 0;
    if (IsBlank(c)) {
      prev_blank_ = true;
      return absl::OkStatus();
    }
    const bool after_blank = prev_blank_;
    prev_blank_ = false;
    if (const char* why = RefusedAtTokenStart(c, column, flow)) return Refuse(i, why);
    switch (c) {
      case '#':
        // A comment begins after a blank. yaml-cpp may take one right after
        // a token too; read as a plain scalar, the rest of the line is
        // counted, never hidden.
        if (!after_blank) break;
        *line_done = true;
        return absl::OkStatus();
      case '[':
      case '{':
        if (!flow) NoteToken(column);
        ++flow_depth_;
        after_json_key_ = false;
        RETURN_IF_ERROR(CountNode(i));
        return CheckDepth(i);
      case ']':
      case '}':
        if (flow_depth_ > 0) --flow_depth_;
        after_json_key_ = true;
        return absl::OkStatus();
      case ',':
        after_json_key_ = false;
        return absl::OkStatus();
      case '\'':
      case '"':
        state_ = c == '\'' ? State::kSingleQuoted : State::kDoubleQuoted;
        quote_begin_ = i;
        NoteToken(column);
        after_json_key_ = false;
        return CountNode(i);
      case '-':
      case '?':
        if (before_blank && !flow) {
          after_json_key_ = false;
          return EnterBlock(column, /*sequence=*/c == '-');
        }
        if (before_blank) return absl::OkStatus();  // `? ` in a flow collection
        break;
      case ':':
        if (before_blank || (flow && (IsFlowIndicator(text_[i + 1]) || after_json_key_))) {
          after_json_key_ = false;
          if (flow) return absl::OkStatus();
          return EnterBlock(token_line_begin_ == line_begin_ ? token_column_ : column,
                            /*sequence=*/false);
        }
        break;
      default:
        break;
    }
    // A plain scalar starts.
    state_ = State::kPlain;
    NoteToken(column);
    plain_brackets_ = 0;
    after_json_key_ = false;
    return CountNode(i);
  }

  const absl::string_view text_;
  const PrescanLimits limits_;
  PrescanFacts facts_;
  State state_ = State::kToken;
  size_t line_begin_ = 0;
  int64_t flow_depth_ = 0;
  struct BlockCollection {
    int column;
    bool sequence;
  };
  std::vector<BlockCollection> block_;  // the open block collections, at most max_depth
  bool prev_blank_ = true;
  bool after_json_key_ = false;
  int token_column_ = 0;         // where the last scalar or flow collection began
  size_t token_line_begin_ = 0;  // on the line that begins here
  size_t quote_begin_ = 0;       // where the open quoted value began
  int64_t plain_brackets_ = 0;   // [ and { inside the plain scalar, not yet closed
};

}  // namespace

absl::StatusOr<PrescanFacts> PrescanYaml(absl::string_view text, const PrescanLimits& limits) {
  return Prescanner(text, limits).Run();
}

int64_t EstimatedParseBytes(int64_t text_bytes, const PrescanFacts& facts) {
  // Measured on yaml-cpp 0.7 (parse_memory_test, docs/DEVELOPMENT.md): the
  // tokens read ahead, the tree and the typed graph took at most ~520 bytes a
  // value (104 MiB for 200,000); each text byte is held a few times (the
  // stream's copy, the scanner's buffer, the scalars).
  constexpr int64_t kBytesPerNode = 700;
  constexpr int64_t kCopiesOfText = 4;
  return text_bytes * kCopiesOfText + facts.nodes * kBytesPerNode;
}

}  // namespace overlap
