// A streaming look at YAML (and JSON) text before yaml-cpp is given it.
//
// Why: yaml-cpp's scanner reads a whole flow collection ahead before its
// parser hands out the first event (it must know whether the collection is a
// mapping's key), holding some 500 bytes a character: 1 MiB of `[` took
// 0.8-2.2 s and 480 MiB before the parser's depth limit could see it. The
// pre-scan walks the text once, in time linear in it and memory bounded by
// the depth limit, and refuses what the parse would bound only too late.
//
// What it refuses (INVALID_ARGUMENT "... at line L, column C: why"):
//   - bytes that YAML/JSON text of ours never holds: NUL and the other C0
//     controls but tab, newline and carriage return (a UTF-16 or UTF-32 file
//     without a byte-order mark is UTF-8 to every check before, and full of
//     NULs), and a carriage return not followed by a newline;
//   - lists and mappings nested deeper than `max_depth`: flow `[`/`{` and
//     block mappings and sequences (by indentation and `- `) both count;
//   - more than `max_nodes` values (scalars, lists and mappings);
//   - what a layer graph or a config never needs: tags (`!!binary`,
//     `!!python/object`, `!<verbatim>`, `!local`), anchors and aliases
//     (`&a`, `*a`: an alias lets a few bytes stand for a huge tree), and
//     directives (`%YAML`, `%TAG`).
//
// It tells quoted scalars, comments, plain scalars (a `[` inside `a: x[1`
// is text) and block scalars (`|`, `>`) apart as yaml-cpp does, so that a
// valid graph is never refused for what its text holds. It does not check the
// syntax: what it lets through, yaml-cpp parses and may still refuse, and the
// parser's own limits (yaml_util's TreeBuilder) stay as a second line.
//
// Thread-safe (no state); never throws.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace overlap {

struct PrescanLimits {
  int max_depth = 32;
  int64_t max_nodes = 200000;
};

// What the text holds, as far as the pre-scan counts: enough to estimate what
// parsing it will take (EstimatedParseBytes).
struct PrescanFacts {
  int64_t nodes = 0;  // scalars, flow collections, block collections
  int depth = 0;      // the deepest nesting met
};

absl::StatusOr<PrescanFacts> PrescanYaml(absl::string_view text, const PrescanLimits& limits);

// What parsing a text of `text_bytes` with `facts` may take at its peak, in
// bytes: yaml-cpp's tokens, read ahead, and the tree built of them (measured:
// docs/DEVELOPMENT.md, "Parsing in bounded memory").
int64_t EstimatedParseBytes(int64_t text_bytes, const PrescanFacts& facts);

}  // namespace overlap
