#include "client/graph_command.h"

#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/table.h"
#include "common/hf_config.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace overlap::client {
namespace {

// The tensor-parallel size: as given, else the devices given, else every
// device of the node (as a submitted graph without devices runs).
absl::StatusOr<int> ResolveTp(DaemonClient& client, const GraphCommandOptions& options) {
  if (options.tp != 0) return options.tp;
  if (!options.devices.empty()) return static_cast<int>(options.devices.size());
  ASSIGN_OR_RETURN(const v1::GetNodeInfoResponse node, client.GetNodeInfo());
  return node.devices_size();
}

}  // namespace

absl::StatusOr<ModelDims> ResolveModel(const GraphCommandOptions& options) {
  if (!options.model.empty() && !options.config.empty()) {
    return absl::InvalidArgumentError("give --model or --config, not both");
  }
  ModelDims model;
  if (!options.model.empty()) {
    ASSIGN_OR_RETURN(model, FindModelPreset(options.model));
  }
  if (!options.config.empty()) {
    ASSIGN_OR_RETURN(const std::string text, ReadGraphFile(options.config));
    ASSIGN_OR_RETURN(model, ModelFromHfConfig(text, options.config));
  }
  const ModelDims& given = options.dims;
  bool changed = false;
  for (auto [field, value] : {std::pair{&model.hidden, given.hidden},
                              {&model.ffn, given.ffn},
                              {&model.heads, given.heads},
                              {&model.kv_heads, given.kv_heads},
                              {&model.head_dim, given.head_dim}}) {
    if (value != 0 && value != *field) {
      *field = value;
      changed = true;
    }
  }
  if (!options.mlp.empty()) {
    if (options.mlp != "gated" && options.mlp != "plain") {
      return absl::InvalidArgumentError(
          absl::StrCat("mlp: unknown \"", options.mlp, "\" (gated or plain)"));
    }
    changed |= model.gated != (options.mlp == "gated");
    model.gated = options.mlp == "gated";
  }
  if (options.model.empty() && options.config.empty()) {
    if (model.hidden == 0 || model.ffn == 0 || model.heads == 0) {
      return absl::InvalidArgumentError(
          "a custom model needs --hidden, --ffn and --heads (or --model NAME, which "
          "--list-models names, or --config config.json)");
    }
  } else if (changed) {
    model.name += "-custom";
  }
  if (!options.name.empty()) model.name = options.name;
  return model;
}

std::string LayerGraphJson(const LayerGraph& graph) {
  const JobSpec& spec = graph.spec;
  nlohmann::ordered_json doc;
  doc["name"] = spec.name;
  if (!spec.devices.empty()) doc["devices"] = spec.devices;
  doc["dtype"] = DTypeName(spec.dtype);
  doc["iterations"] = spec.iterations;
  doc["warmup"] = spec.warmup;
  doc["ops"] = nlohmann::ordered_json::array();
  for (const OpSpec& op : spec.ops) {
    nlohmann::ordered_json item = {{"id", op.id}, {"type", OpTypeName(op.type)}, {"m", op.m}};
    if (!IsCollectiveOnly(op.type)) item["k"] = op.k;
    item["n"] = op.n;
    if (!op.after.empty()) item["after"] = op.after;
    doc["ops"].push_back(std::move(item));
  }
  return doc.dump(2) + "\n";
}

std::string FormatModelPresets(bool json) {
  if (json) {
    nlohmann::ordered_json models = nlohmann::ordered_json::array();
    for (const ModelDims& m : ModelPresets()) {
      models.push_back({{"name", m.name},
                        {"hidden", m.hidden},
                        {"ffn", m.ffn},
                        {"heads", m.heads},
                        {"kv_heads", m.kv_heads},
                        {"head_dim", m.head_dim},
                        {"mlp", m.gated ? "gated" : "plain"}});
    }
    return models.dump(2) + "\n";
  }
  TextTable table({{"model"},
                   {"hidden", Align::kRight},
                   {"ffn", Align::kRight},
                   {"heads", Align::kRight},
                   {"kv heads", Align::kRight},
                   {"head dim", Align::kRight},
                   {"mlp"}});
  for (const ModelDims& m : ModelPresets()) {
    table.AddRow({m.name, absl::StrCat(m.hidden), absl::StrCat(m.ffn), absl::StrCat(m.heads),
                  absl::StrCat(m.kv_heads), absl::StrCat(m.head_dim), m.gated ? "gated" : "plain"});
  }
  return table.Render();
}

int RunGraph(DaemonClient& client, const GraphCommandOptions& options, bool json, std::ostream& out,
             std::ostream& err) {
  if (options.list_models) {
    out << FormatModelPresets(json);
    return kExitOk;
  }
  absl::StatusOr<ModelDims> model = ResolveModel(options);
  absl::StatusOr<LayerPass> pass = ParseLayerPass(options.pass);
  absl::StatusOr<DType> dtype = ParseDType(options.dtype);
  for (const absl::Status& status : {model.status(), pass.status(), dtype.status()}) {
    if (!status.ok()) {
      err << "overlapctl: graph: " << status.message() << "\n";
      return kExitUsage;
    }
  }
  absl::StatusOr<int> tp = ResolveTp(client, options);
  if (!tp.ok()) {
    err << "overlapctl: graph: give --tp, or start overlapd so that its GPUs can be counted\n";
    return ReportCallError(tp.status(), client.address(), err);
  }
  LayerGraphOptions layer;
  layer.tp = *tp;
  layer.seq = options.seq;
  layer.micro_batch = options.micro_batch;
  layer.layers = options.layers;
  layer.sequence_parallel = options.sequence_parallel;
  layer.pass = *pass;
  layer.grads = options.grads;
  layer.dtype = *dtype;
  layer.devices = options.devices;
  absl::StatusOr<LayerGraph> graph = BuildLayerGraph(*model, layer);
  if (!graph.ok()) {
    err << "overlapctl: graph: " << graph.status().message() << "\n";
    return kExitUsage;
  }
  const std::string text = json ? LayerGraphJson(*graph) : LayerGraphYaml(*graph);
  if (options.output.empty()) {
    out << text;
    return kExitOk;
  }
  if (int rc = WriteTextFile(options.output, text, err); rc != kExitOk) return rc;
  err << "wrote " << graph->spec.ops.size() << " ops of " << graph->spec.name << " to "
      << options.output << "\n";
  return kExitOk;
}

}  // namespace overlap::client
