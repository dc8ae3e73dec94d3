#include "common/text.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace overlap {
namespace {

// The length of the well-formed UTF-8 sequence at the start of `text` (1-4), or
// 0 when it is not one; its code point in *code_point.
size_t Utf8SequenceLength(absl::string_view text, uint32_t* code_point) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) {
    *code_point = lead;
    return 1;
  }
  size_t length;
  uint32_t value;
  uint32_t min_value;
  if ((lead & 0xE0) == 0xC0) {
    length = 2, value = lead & 0x1F, min_value = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, value = lead & 0x0F, min_value = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, value = lead & 0x07, min_value = 0x10000;
  } else {
    return 0;
  }
  if (text.size() < length) return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
    value = (value << 6) | (byte(i) & 0x3F);
  }
  if (value < min_value || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return 0;
  *code_point = value;
  return length;
}

// Unicode's format characters (category Cf) and line and paragraph
// separators: invisible, yet they reorder (U+202E turns "job-1 fdp." into
// what reads as another name), hide or break the text around them on a
// terminal or a web page.
bool IsFormat(uint32_t c) {
  return c == 0xAD || (c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F ||
         c == 0x8E2 || c == 0x180E || (c >= 0x200B && c <= 0x200F) ||
         (c >= 0x2028 && c <= 0x202E) || (c >= 0x2060 && c <= 0x2064) ||
         (c >= 0x2066 && c <= 0x206F) || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) ||
         c == 0x110BD || c == 0x110CD || (c >= 0x13430 && c <= 0x1343F) ||
         (c >= 0x1BCA0 && c <= 0x1BCA3) || (c >= 0x1D173 && c <= 0x1D17A) || c == 0xE0001 ||
         (c >= 0xE0020 && c <= 0xE007F);
}

// Characters that show as nothing, or as a blank that is not a space: two
// names that differ by one look the same (U+3164 HANGUL FILLER is a letter to
// Unicode, and passes any rule that asks for letters). Unicode's other
// default-ignorable code points, the Hangul fillers, the braille blank and
// variation selectors.
bool IsInvisible(uint32_t c) {
  return c == 0x34F || c == 0x115F || c == 0x1160 || c == 0x17B4 || c == 0x17B5 ||
         (c >= 0x180B && c <= 0x180F) || c == 0x2800 || c == 0x3164 ||
         (c >= 0xFE00 && c <= 0xFE0F) || c == 0xFFA0 || (c >= 0xFFF0 && c <= 0xFFF8) ||
         (c >= 0xE0000 && c <= 0xE0FFF);
}

// Noncharacters (U+FDD0..U+FDEF, and the last two of every plane) and
// private-use characters: they mean nothing outside a private agreement, so a
// terminal or a web page shows each as it likes, often as nothing.
bool IsNoncharacterOrPrivateUse(uint32_t c) {
  return (c >= 0xFDD0 && c <= 0xFDEF) || (c & 0xFFFE) == 0xFFFE || (c >= 0xE000 && c <= 0xF8FF) ||
         c >= 0xF0000;  // planes 15 and 16 are private use
}

bool IsControl(uint32_t code_point) {
  return code_point < 0x20 || code_point == 0x7F || (code_point >= 0x80 && code_point <= 0x9F) ||
         IsFormat(code_point) || IsInvisible(code_point) || IsNoncharacterOrPrivateUse(code_point);
}

void AppendEscaped(uint32_t code_point, std::string* out) {
  switch (code_point) {
    case '\n':
      *out += "\\n";
      return;
    case '\r':
      *out += "\\r";
      return;
    case '\t':
      *out += "\\t";
      return;
    default:
      // Two calls, not a ternary format: absl checks a format string at compile
      // time only when it is a literal (clang refuses the ternary).
      if (code_point < 0x100) {
        absl::StrAppendFormat(out, "\\x%02x", code_point);
      } else {
        absl::StrAppendFormat(out, "\\u%04x", code_point);
      }
  }
}

}  // namespace

std::optional<size_t> FirstInvalidUtf8(absl::string_view text) {
  size_t offset = 0;
  while (offset < text.size()) {
    uint32_t code_point = 0;
    const size_t length = Utf8SequenceLength(text.substr(offset), &code_point);
    if (length == 0) return offset;
    offset += length;
  }
  return std::nullopt;
}

bool HasControlCharacters(absl::string_view text) {
  size_t offset = 0;
  while (offset < text.size()) {
    uint32_t code_point = 0;
    const size_t length = Utf8SequenceLength(text.substr(offset), &code_point);
    if (length == 0) {
      ++offset;  // not UTF-8: not a control character either
      continue;
    }
    if (IsControl(code_point)) return true;
    offset += length;
  }
  return false;
}

std::string Excerpt(absl::string_view text, size_t max_bytes) {
  std::string out;
  size_t offset = 0;
  while (offset < text.size() && offset < max_bytes) {
    uint32_t code_point = 0;
    const size_t length = Utf8SequenceLength(text.substr(offset), &code_point);
    if (length == 0) {
      absl::StrAppendFormat(&out, "\\x%02x", static_cast<unsigned char>(text[offset]));
      ++offset;
      continue;
    }
    if (offset + length > max_bytes) break;  // keep the cut on a character boundary
    if (IsControl(code_point)) {
      AppendEscaped(code_point, &out);
    } else {
      out.append(text.data() + offset, length);
    }
    offset += length;
  }
  if (offset < text.size()) absl::StrAppend(&out, "... (", text.size(), " bytes in all)");
  return out;
}

std::string QuotedExcerpt(absl::string_view text, size_t max_bytes) {
  return absl::StrCat("\"", Excerpt(text, max_bytes), "\"");
}

}  // namespace overlap
