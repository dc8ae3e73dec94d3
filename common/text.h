// Text that came from a user (graph names and ids, job ids, file contents)
// on its way into error messages, the job store and a terminal: UTF-8 checks,
// control characters, and excerpts of bounded length.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace overlap {

// How much of a user's text an error message quotes: enough to recognise it,
// never so much that the message outgrows gRPC's 8 KiB of trailers.
inline constexpr size_t kMaxQuotedBytes = 200;

// The offset of the first byte that is not part of well-formed UTF-8 (overlong
// forms, surrogates and code points above U+10FFFF are not); nullopt when all is.
std::optional<size_t> FirstInvalidUtf8(absl::string_view text);

// True when `text` holds a C0 control character (newline and tab included),
// DEL, a C1 control (U+0080..U+009F, which terminals also act on), or an
// invisible character that reorders or hides text: Unicode's format
// characters (bidi overrides such as U+202E, zero-width spaces, U+FEFF), the
// line and paragraph separators U+2028/U+2029, the other default-ignorable
// characters and blank fillers (U+3164 HANGUL FILLER, U+115F, U+1160, U+FFA0,
// U+2800 BRAILLE PATTERN BLANK, variation selectors); or a noncharacter
// (U+FFFE, U+FFFF, U+FDD0..U+FDEF, U+nFFFE/U+nFFFF) or private-use character
// (U+E000..U+F8FF, planes 15 and 16), which show as whatever a font makes of
// them. Names, ids and owners are refused with any of these; Excerpt escapes
// them.
bool HasControlCharacters(absl::string_view text);

// `text` safe to print on a terminal and to quote in a message: the
// characters HasControlCharacters finds, and bytes that are not UTF-8,
// written as \n, \t, \x1b, \u202e, ...; at most `max_bytes` of it (cut at a character boundary), followed by
// "... (N bytes in all)" when cut.
std::string Excerpt(absl::string_view text, size_t max_bytes = kMaxQuotedBytes);

// Excerpt in double quotes.
std::string QuotedExcerpt(absl::string_view text, size_t max_bytes = kMaxQuotedBytes);

}  // namespace overlap
