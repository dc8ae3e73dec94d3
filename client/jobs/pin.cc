#include "client/jobs/pin.h"

#include <yaml-cpp/yaml.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/spec_prescan.h"
#include "common/status_macros.h"
#include "common/text.h"
#include "common/yaml_util.h"

namespace overlap::client {
namespace {

// yaml-cpp reads a mapping as a key (`{}` on a line of its own) but cannot
// read back what it writes of one (`{}: ~`); a graph's keys are names.
bool KeysAreScalars(const YAML::Node& map) {
  for (const auto& entry : map) {
    if (!entry.first.IsScalar()) return false;
  }
  return true;
}

// Scalars yaml-cpp 0.7 writes plain that read back as something else:
//   - a carriage return, written as the raw byte: one not followed by a
//     newline is text the daemon's parser refuses (PrescanYaml), and one
//     before the line's end is read as part of the line break;
//   - "--- x" or "... x": as a top-level key, at the start of a line, it is a
//     document marker.
bool NeedsQuotes(const std::string& scalar) {
  if (scalar.find('\r') != std::string::npos) return true;
  const absl::string_view start = absl::string_view(scalar).substr(0, 3);
  return (start == "---" || start == "...") &&
         (scalar.size() == 3 || scalar[3] == ' ' || scalar[3] == '\t');
}

// Writes `node` as yaml-cpp's `out << node` does (each collection in the style
// it was read in, null as ~, a quoted scalar's "!" tag left out), except that
// the scalars NeedsQuotes names are written double-quoted.
void EmitReadable(const YAML::Node& node, YAML::Emitter& out) {
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      out << YAML::Null;
      return;
    case YAML::NodeType::Scalar:
      if (NeedsQuotes(node.Scalar())) out << YAML::DoubleQuoted;
      out << node.Scalar();
      return;
    case YAML::NodeType::Sequence:
      out << (node.Style() == YAML::EmitterStyle::Flow ? YAML::Flow : YAML::Block);
      out << YAML::BeginSeq;
      for (const YAML::Node& item : node) EmitReadable(item, out);
      out << YAML::EndSeq;
      return;
    case YAML::NodeType::Map:
      out << (node.Style() == YAML::EmitterStyle::Flow ? YAML::Flow : YAML::Block);
      out << YAML::BeginMap;
      for (const auto& entry : node) {
        out << YAML::Key;
        EmitReadable(entry.first, out);
        out << YAML::Value;
        EmitReadable(entry.second, out);
      }
      out << YAML::EndMap;
      return;
  }
}

}  // namespace

absl::StatusOr<std::string> PinnedGraph(const v1::Job& job) {
  std::map<std::string, const v1::OpResult*> ran;
  for (const v1::OpResult& op : job.result().ops()) ran[op.id()] = &op;
  if (ran.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.id(), " has no op that ran to the end: nothing to pin (it is ",
                     v1::JobState_Name(job.state()), ")"));
  }
  ASSIGN_OR_RETURN(YAML::Node root, yaml_util::LoadDocument(job.spec(), job.id()));
  // The stored text is what the daemon accepted, but it comes back from disk:
  // every node is checked for the kind it is used as, since yaml-cpp throws
  // on a key looked up in a scalar (a graph `h,` once ended overlapctl).
  if (!root.IsMap() || !KeysAreScalars(root) || !root["ops"].IsSequence()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", job.id(), ": its graph has no ops list"));
  }
  YAML::Node ops = root["ops"];
  std::vector<std::string> unpinned;
  for (YAML::Node op : ops) {
    if (!op.IsMap() || !KeysAreScalars(op)) {
      return absl::InvalidArgumentError(
          absl::StrCat("job ", job.id(), ": its graph has an op that is not a mapping"));
    }
    const std::string id = op["id"] && op["id"].IsScalar() ? op["id"].Scalar() : "";
    auto it = ran.find(id);
    // An op the overlap pass fused ran as another type (a gemm as ag_gemm):
    // its schedule means nothing to the op as written.
    const std::string type = op["type"] && op["type"].IsScalar() ? op["type"].Scalar() : "";
    if (it == ran.end() || (!it->second->type().empty() && it->second->type() != type)) {
      unpinned.push_back(id);
      continue;
    }
    const v1::OpResult& r = *it->second;
    op["mode"] = r.mode();
    // chunks only means something to the modes that cut the rows.
    if (r.mode() == "chunked" || r.mode() == "ring") {
      op["chunks"] = r.chunks();
    } else {
      op.remove("chunks");
    }
    // A collective between daemons on the host backend reports what carried it
    // (gloo); the graph names the schedule's transport, nccl.
    op["transport"] = r.transport() == "gloo" ? "nccl" : r.transport();
    // An all_reduce's algorithm as it ran (auto resolved): none is the default.
    if (r.algorithm().empty()) {
      op.remove("algorithm");
    } else {
      op["algorithm"] = r.algorithm();
    }
  }
  YAML::Emitter out;
  EmitReadable(root, out);
  if (!out.good()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", job.id(), ": its graph cannot be written back: ", out.GetLastError()));
  }
  // The comment lines quote stored text through Excerpt: an id with a newline
  // in it would otherwise end the comment and write YAML of its own.
  std::string text = absl::StrCat(
      "# pinned from ", Excerpt(job.id()), " (", Excerpt(job.name()),
      "): every op runs the schedule it ran there",
      job.result().ops_size() > 0 ? absl::StrCat(", tp = ", job.result().ops(0).tp()) : "",
      job.result().gpu().empty() ? "" : absl::StrCat(", on ", Excerpt(job.result().gpu())), "\n");
  if (!unpinned.empty()) {
    absl::StrAppend(
        &text, "# not pinned (no result: the job ended before them): ",
        absl::StrJoin(unpinned, ", ",
                      [](std::string* out, const std::string& id) { out->append(Excerpt(id)); }),
        "\n");
  }
  absl::StrAppend(&text, out.c_str(), "\n");
  // What pinning adds (a mode, chunks and a transport an op) can take a graph
  // at the parser's limits past them (200,000 values), and such a pin would be
  // refused wherever it is submitted. The pre-scan is the parser's first step
  // and holds those limits; one pass, so a pin costs no second parse.
  if (absl::Status readable = PrescanYaml(text, PrescanLimits{}).status(); !readable.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job ", job.id(), ": its pinned graph would not be read back: ", readable.message()));
  }
  return text;
}

}  // namespace overlap::client
