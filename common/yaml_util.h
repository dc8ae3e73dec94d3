// Strict readers for yaml-cpp nodes, shared by the job-spec and config parsers.
// yaml-cpp throws; everything here catches at this edge and returns
// INVALID_ARGUMENT with a one-line message. Messages carry no field path: the
// caller prefixes it with FieldError().
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/parse_budget.h"
#include "yaml-cpp/yaml.h"

namespace overlap {
namespace yaml_util {

// What one parse may take. Every YAML text the daemon reads (graphs from users
// and peers, its config, pinned graphs) is untrusted or nearly so, and
// yaml-cpp itself bounds neither time nor memory (yaml_util.cc says why), so
// LoadDocument holds each parse to these: first in a pre-scan of the text
// (spec_prescan.h) before yaml-cpp sees it, then again as it builds the tree.
struct YamlLimits {
  size_t max_bytes = 4 << 20;  // the text
  int max_depth = 32;          // lists and mappings inside each other
  int64_t max_nodes = 200000;  // scalars, lists and mappings in all
};

// Parses one YAML (or JSON) document, within `limits`. INVALID_ARGUMENT,
// prefixed with `source_name` when given, for a syntax error (naming the
// 1-based line and column), more than one document, a text past a limit, or
// what the pre-scan refuses (PrescanYaml: control characters, tags, anchors
// and aliases, directives, block scalars, quoted values over several lines).
// Returns in time linear in the text; the memory it takes beyond the text is
// bounded by the pre-scan before yaml-cpp starts.
absl::StatusOr<YAML::Node> LoadDocument(absl::string_view text, absl::string_view source_name,
                                        const YamlLimits& limits = YamlLimits());

// A document parsed under a share of a ParseBudget: the share is held until
// the tree is gone (members are destroyed last to first).
struct BudgetedDocument {
  ParseBudget::Grant grant;
  YAML::Node root;
};

// LoadDocument, holding what the pre-scan estimates the parse takes
// (EstimatedParseBytes) of `budget` from before yaml-cpp starts until the
// result is destroyed. RESOURCE_EXHAUSTED when the budget has no room in time.
absl::StatusOr<BudgetedDocument> LoadBudgetedDocument(absl::string_view text,
                                                      absl::string_view source_name,
                                                      const YamlLimits& limits,
                                                      ParseBudget& budget);

// INVALID_ARGUMENT "<path>: <message>".
absl::Status FieldError(absl::string_view path, absl::string_view message);

// How a node appears in "(got ...)": a quoted, escaped, shortened scalar, or
// "null", "a list", "a mapping".
std::string Describe(const YAML::Node& node);

// A decimal integer in [min, max] written as a plain (unquoted) scalar. 1.5,
// "12", 1e3 and 0x10 are rejected, as are values outside int64.
absl::StatusOr<int64_t> ReadInt64(const YAML::Node& node, int64_t min, int64_t max);
absl::StatusOr<uint64_t> ReadUint64(const YAML::Node& node);
// A plain true/false (any case; YAML 1.1 yes/no/on/off are rejected).
absl::StatusOr<bool> ReadBool(const YAML::Node& node);
// Any scalar, quoted or not (so `id: 1` is the id "1"); null, lists and maps are rejected.
absl::StatusOr<std::string> ReadString(const YAML::Node& node);
// A finite number (integer or decimal): > 0, or >= 0 when zero is allowed.
absl::StatusOr<double> ReadDouble(const YAML::Node& node, bool allow_zero);

}  // namespace yaml_util
}  // namespace overlap
