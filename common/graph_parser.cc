#include "common/graph_parser.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checked_size.h"
#include "common/status_macros.h"
#include "common/yaml_util.h"

namespace overlap {
namespace {

using yaml_util::Describe;
using yaml_util::FieldError;

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

const char* const kTopLevelFields[] = {"name",
                                       "devices",
                                       "dtype",
                                       "iterations",
                                       "warmup",
                                       "verify",
                                       "priority",
                                       "seed",
                                       "ops",
                                       "head_start",
                                       "layer_step",
                                       "bucket_mib",
                                       "retune",
                                       "timeline",
                                       "mesh",
                                       "chunk_kib",
                                       "defer_bound_ms",
                                       "nodes",
                                       "fuse",
                                       "scheduler",
                                       "version",
                                       "autotune_budget_s",
                                       "priority_class",
                                       "gemm_alone_sustain_ms"};
const char* const kOpFields[] = {"id",    "type",   "m",          "k",         "n",
                                 "mode",  "chunks", "transport",  "algorithm", "group",
                                 "after", "input",  "activation", "parallel"};
const char* const kMeshFields[] = {"tp", "dp"};

// Adds the field path to an error from a reader that does not know it.
absl::Status AtPath(const absl::Status& status, absl::string_view path) {
  return FieldError(path, status.message());
}

template <typename T>
absl::StatusOr<T> WithPath(absl::StatusOr<T> result, absl::string_view path) {
  if (!result.ok()) return AtPath(result.status(), path);
  return result;
}

// Walks a mapping's entries in file order, rejecting duplicate and unknown keys.
// `visit(key, value)` returns a Status.
template <size_t N, typename Visit>
absl::Status ForEachField(const YAML::Node& map, absl::string_view path,
                          const char* const (&known)[N], absl::string_view unknown_prefix,
                          Visit visit) {
  std::set<std::string> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (!it->first.IsScalar()) {
      return absl::InvalidArgumentError(absl::StrCat(
          unknown_prefix, "field names must be strings (got ", Describe(it->first), ")"));
    }
    const std::string key = it->first.Scalar();
    bool is_known = false;
    for (const char* name : known) is_known |= key == name;
    if (!is_known) {
      return absl::InvalidArgumentError(
          absl::StrCat(unknown_prefix, "unknown ", path.empty() ? "top-level " : "", "field ",
                       Describe(it->first), " (known: ", absl::StrJoin(known, ", "), ")"));
    }
    if (!seen.insert(key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(unknown_prefix, "duplicate field ", Describe(it->first)));
    }
    RETURN_IF_ERROR(visit(key, it->second));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ReadInt(const YAML::Node& node, int64_t min, absl::string_view path) {
  ASSIGN_OR_RETURN(int64_t value, WithPath(yaml_util::ReadInt64(node, min, kInt32Max), path));
  return static_cast<int>(value);
}

// A name read as what `parse` makes of it (ParseDType, ParseOpType, ...).
template <typename Parse>
auto ReadNamed(const YAML::Node& node, absl::string_view path, Parse parse)
    -> decltype(parse(std::string())) {
  ASSIGN_OR_RETURN(const std::string name, WithPath(yaml_util::ReadString(node), path));
  return WithPath(parse(name), path);
}

absl::StatusOr<std::vector<std::string>> ReadAfter(const YAML::Node& node, absl::string_view path) {
  std::vector<std::string> after;
  if (node.IsScalar()) {
    after.push_back(node.Scalar());
    return after;
  }
  if (node.IsNull()) return after;
  if (!node.IsSequence()) {
    return FieldError(
        path, absl::StrCat("must be an op id or a list of op ids (got ", Describe(node), ")"));
  }
  for (size_t i = 0; i < node.size(); ++i) {
    ASSIGN_OR_RETURN(std::string id,
                     WithPath(yaml_util::ReadString(node[i]), absl::StrCat(path, "[", i, "]")));
    after.push_back(std::move(id));
  }
  return after;
}

absl::StatusOr<OpSpec> ParseOp(const YAML::Node& node, size_t index) {
  const std::string path = absl::StrCat("ops[", index, "]");
  if (!node.IsMap()) {
    return FieldError(path, absl::StrCat("must be a mapping (got ", Describe(node), ")"));
  }
  OpSpec op;
  std::set<std::string> given;
  auto visit = [&](const std::string& key, const YAML::Node& value) -> absl::Status {
    given.insert(key);
    const std::string field = absl::StrCat(path, ".", key);
    if (key == "id") {
      ASSIGN_OR_RETURN(op.id, WithPath(yaml_util::ReadString(value), field));
    } else if (key == "type") {
      ASSIGN_OR_RETURN(op.type, ReadNamed(value, field, ParseOpType));
    } else if (key == "m" || key == "k" || key == "n") {
      int64_t& dim = key == "m" ? op.m : key == "k" ? op.k : op.n;
      ASSIGN_OR_RETURN(dim, WithPath(yaml_util::ReadInt64(value, 1, kInt64Max), field));
    } else if (key == "mode") {
      ASSIGN_OR_RETURN(op.mode, ReadNamed(value, field, ParseOverlapMode));
    } else if (key == "chunks") {
      ASSIGN_OR_RETURN(op.chunks, ReadInt(value, 1, field));
    } else if (key == "transport") {
      ASSIGN_OR_RETURN(op.transport, ReadNamed(value, field, ParseTransport));
    } else if (key == "algorithm") {
      ASSIGN_OR_RETURN(op.algorithm, ReadNamed(value, field, ParseAllReduceAlgorithm));
    } else if (key == "group") {
      ASSIGN_OR_RETURN(op.group, ReadNamed(value, field, ParseOpGroup));
    } else if (key == "after") {
      ASSIGN_OR_RETURN(op.after, ReadAfter(value, field));
    } else if (key == "input") {
      ASSIGN_OR_RETURN(op.input, WithPath(yaml_util::ReadString(value), field));
    } else if (key == "parallel") {
      ASSIGN_OR_RETURN(std::string name, WithPath(yaml_util::ReadString(value), field));
      if (name != "row" && name != "column") {
        return FieldError(
            field, absl::StrCat("must be row or column (got \"", absl::CHexEscape(name), "\")"));
      }
      op.row_parallel = name == "row";
    } else if (key == "activation") {
      ASSIGN_OR_RETURN(op.activation, ReadNamed(value, field, ParseActivation));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(ForEachField(node, path, kOpFields, absl::StrCat(path, ": "), visit));
  for (const char* required : {"id", "type", "m", "n"}) {
    if (!given.count(required)) {
      return FieldError(absl::StrCat(path, ".", required), "required field missing");
    }
  }
  if (given.count("parallel") && op.type != OpType::kGemm) {
    return FieldError(absl::StrCat(path, ".parallel"),
                      absl::StrCat("only for gemm (how its GEMM splits over the ranks); ",
                                   OpTypeName(op.type), " splits as its type says"));
  }
  if (given.count("activation") && op.input.empty()) {
    return FieldError(absl::StrCat(path, ".activation"),
                      "applies to another op's output: name that op with input");
  }
  // An op runs after the op it reads.
  if (!op.input.empty() &&
      std::find(op.after.begin(), op.after.end(), op.input) == op.after.end()) {
    op.after.push_back(op.input);
  }
  const bool collective = IsCollectiveOnly(op.type);
  if (!collective && !given.count("k")) {
    return FieldError(absl::StrCat(path, ".k"), "required field missing");
  }
  if (collective && given.count("k")) {
    return FieldError(
        absl::StrCat(path, ".k"),
        absl::StrCat(OpTypeName(op.type), " is a collective alone, with no GEMM: leave k out"));
  }
  return op;
}

// mesh: {tp: T, dp: D}, both required.
absl::StatusOr<Mesh> ParseMesh(const YAML::Node& node) {
  if (!node.IsMap()) {
    return FieldError(
        "mesh", absl::StrCat("must be a mapping like {tp: 2, dp: 2} (got ", Describe(node), ")"));
  }
  Mesh mesh;
  auto visit = [&](const std::string& key, const YAML::Node& value) -> absl::Status {
    // Bounded here, before anything sizes a group list by it (checked_size.h).
    ASSIGN_OR_RETURN(const int64_t degree, WithPath(yaml_util::ReadInt64(value, 1, kMaxMeshRanks),
                                                    absl::StrCat("mesh.", key)));
    (key == "tp" ? mesh.tp : mesh.dp) = static_cast<int>(degree);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(ForEachField(node, "mesh", kMeshFields, "mesh: ", visit));
  for (const char* required : {"tp", "dp"}) {
    if ((std::string(required) == "tp" ? mesh.tp : mesh.dp) == 0) {
      return FieldError(absl::StrCat("mesh.", required), "required field missing");
    }
  }
  return mesh;
}

absl::StatusOr<std::vector<int>> ReadDevices(const YAML::Node& value) {
  if (!value.IsSequence()) {
    return FieldError("devices",
                      absl::StrCat("must be a list of device indices (got ", Describe(value), ")"));
  }
  if (value.size() == 0) {
    return FieldError("devices", "must not be empty (omit it to use every device)");
  }
  std::vector<int> devices;
  for (size_t i = 0; i < value.size(); ++i) {
    ASSIGN_OR_RETURN(int device, ReadInt(value[i], 0, absl::StrCat("devices[", i, "]")));
    devices.push_back(device);
  }
  return devices;
}

absl::StatusOr<std::vector<std::string>> ReadNodes(const YAML::Node& value) {
  if (!value.IsSequence() || value.size() == 0) {
    return FieldError("nodes", absl::StrCat("must be a non-empty list of peer addresses "
                                            "(host:port), got ",
                                            Describe(value)));
  }
  std::vector<std::string> nodes;
  for (size_t i = 0; i < value.size(); ++i) {
    ASSIGN_OR_RETURN(std::string node,
                     WithPath(yaml_util::ReadString(value[i]), absl::StrCat("nodes[", i, "]")));
    nodes.push_back(std::move(node));
  }
  return nodes;
}

absl::StatusOr<std::vector<OpSpec>> ReadOps(const YAML::Node& value) {
  if (!value.IsSequence()) {
    return FieldError("ops", absl::StrCat("must be a list of ops (got ", Describe(value), ")"));
  }
  std::vector<OpSpec> ops;
  for (size_t i = 0; i < value.size(); ++i) {
    ASSIGN_OR_RETURN(OpSpec op, ParseOp(value[i], i));
    ops.push_back(std::move(op));
  }
  return ops;
}

absl::Status CheckVersion(const YAML::Node& value) {
  ASSIGN_OR_RETURN(const int version, ReadInt(value, 1, "version"));
  if (version != kGraphVersion) {
    return FieldError("version", absl::StrCat("this overlapd reads graph version ", kGraphVersion,
                                              "; got ", version, " (a newer overlapd's graph?)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<JobSpec> ParseDocument(const YAML::Node& root) {
  if (root.IsNull()) return absl::InvalidArgumentError("job spec is empty");
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job spec must be a mapping (got ", Describe(root), ")"));
  }
  JobSpec spec;
  spec.name = "unnamed";
  bool has_ops = false;
  auto visit = [&](const std::string& key, const YAML::Node& value) -> absl::Status {
    if (key == "name") {
      ASSIGN_OR_RETURN(spec.name, WithPath(yaml_util::ReadString(value), key));
    } else if (key == "devices") {
      ASSIGN_OR_RETURN(spec.devices, ReadDevices(value));
    } else if (key == "nodes") {
      ASSIGN_OR_RETURN(spec.nodes, ReadNodes(value));
    } else if (key == "dtype") {
      ASSIGN_OR_RETURN(spec.dtype, ReadNamed(value, key, ParseDType));
    } else if (key == "version") {
      RETURN_IF_ERROR(CheckVersion(value));
    } else if (key == "autotune_budget_s") {
      ASSIGN_OR_RETURN(spec.autotune_budget_s,
                       WithPath(yaml_util::ReadDouble(value, /*allow_zero=*/true), key));
    } else if (key == "iterations") {
      ASSIGN_OR_RETURN(spec.iterations, ReadInt(value, 1, key));
    } else if (key == "warmup") {
      ASSIGN_OR_RETURN(spec.warmup, ReadInt(value, 0, key));
    } else if (key == "verify") {
      ASSIGN_OR_RETURN(spec.verify, WithPath(yaml_util::ReadBool(value), key));
    } else if (key == "head_start") {
      ASSIGN_OR_RETURN(std::string name, WithPath(yaml_util::ReadString(value), key));
      if (name != "heat" && name != "idle") {
        return FieldError(key, absl::StrCat("must be heat or idle (got \"", name, "\")"));
      }
      spec.heat_head_start = name == "heat";
    } else if (key == "gemm_alone_sustain_ms") {
      ASSIGN_OR_RETURN(spec.gemm_alone_sustain_ms,
                       WithPath(yaml_util::ReadDouble(value, /*allow_zero=*/true), key));
    } else if (key == "layer_step") {
      ASSIGN_OR_RETURN(spec.layer_step, WithPath(yaml_util::ReadBool(value), key));
    } else if (key == "bucket_mib") {
      ASSIGN_OR_RETURN(spec.bucket_mib, ReadInt(value, 0, key));
    } else if (key == "chunk_kib") {
      ASSIGN_OR_RETURN(spec.chunk_kib, ReadInt(value, 0, key));
    } else if (key == "defer_bound_ms") {
      ASSIGN_OR_RETURN(spec.defer_bound_ms,
                       WithPath(yaml_util::ReadDouble(value, /*allow_zero=*/true), key));
    } else if (key == "mesh") {
      ASSIGN_OR_RETURN(spec.mesh, ParseMesh(value));
    } else if (key == "retune") {
      ASSIGN_OR_RETURN(spec.retune, WithPath(yaml_util::ReadBool(value), key));
    } else if (key == "timeline") {
      ASSIGN_OR_RETURN(spec.timeline, WithPath(yaml_util::ReadBool(value), key));
    } else if (key == "scheduler") {
      ASSIGN_OR_RETURN(spec.scheduler, ReadNamed(value, key, ParseScheduler));
    } else if (key == "fuse") {
      ASSIGN_OR_RETURN(spec.fuse, WithPath(yaml_util::ReadBool(value), key));
    } else if (key == "priority") {
      ASSIGN_OR_RETURN(spec.priority, ReadInt(value, kInt32Min, key));
    } else if (key == "priority_class") {
      ASSIGN_OR_RETURN(spec.priority_class, ReadNamed(value, key, ParsePriorityClass));
    } else if (key == "seed") {
      ASSIGN_OR_RETURN(spec.seed, WithPath(yaml_util::ReadUint64(value), key));
    } else if (key == "ops") {
      has_ops = true;
      ASSIGN_OR_RETURN(spec.ops, ReadOps(value));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(ForEachField(root, "", kTopLevelFields, "", visit));
  if (!has_ops) return FieldError("ops", "required field missing");
  return spec;
}

std::atomic<int64_t> graphs_parsed{0};

}  // namespace

int64_t GraphsParsed() { return graphs_parsed.load(std::memory_order_relaxed); }

absl::StatusOr<JobSpec> ParseJobSpec(absl::string_view text, absl::string_view source_name,
                                     ParseBudget* budget) {
  graphs_parsed.fetch_add(1, std::memory_order_relaxed);
  absl::StatusOr<JobSpec> spec;
  {
    // The text's size is bounded where it comes in (max_spec_bytes on the
    // user socket and the peer port, gRPC's message limit before that), and
    // an operator may raise it past YamlLimits' default: no second byte cap.
    // Depth and node count still hold, as does time linear in the text.
    yaml_util::YamlLimits limits;
    limits.max_bytes = std::numeric_limits<size_t>::max();
    // The tree is gone, and the budget's share given back, at this scope's end.
    yaml_util::BudgetedDocument document;
    if (budget != nullptr) {
      ASSIGN_OR_RETURN(document,
                       yaml_util::LoadBudgetedDocument(text, source_name, limits, *budget));
    } else {
      ASSIGN_OR_RETURN(document.root, yaml_util::LoadDocument(text, source_name, limits));
    }
    try {
      spec = ParseDocument(document.root);
    } catch (const std::exception& e) {  // yaml-cpp conversion errors; should not happen
      spec = absl::InvalidArgumentError(absl::StrCat("malformed job spec: ", e.what()));
    }
  }
  if (!spec.ok() && !source_name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source_name, ": ", spec.status().message()));
  }
  return spec;
}

}  // namespace overlap
