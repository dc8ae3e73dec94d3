#include "client/jobs/graph_command.h"

#include "absl/strings/str_cat.h"
#include "client/core/command_io.h"
#include "client/format/table.h"
#include "common/hf_config.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace overlap::client {
namespace {

// Every device of the node (as a submitted graph without devices runs).
absl::StatusOr<int> NodeDeviceCount(DaemonClient& client) {
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
  if (spec.mesh.declared()) doc["mesh"] = {{"tp", spec.mesh.tp}, {"dp", spec.mesh.dp}};
  doc["dtype"] = DTypeName(spec.dtype);
  doc["iterations"] = spec.iterations;
  doc["warmup"] = spec.warmup;
  const JobSpec defaults;
  if (spec.bucket_mib != defaults.bucket_mib) doc["bucket_mib"] = spec.bucket_mib;
  if (spec.chunk_kib != defaults.chunk_kib) doc["chunk_kib"] = spec.chunk_kib;
  if (spec.defer_bound_ms != defaults.defer_bound_ms) doc["defer_bound_ms"] = spec.defer_bound_ms;
  if (spec.scheduler != defaults.scheduler) doc["scheduler"] = SchedulerName(spec.scheduler);
  doc["ops"] = nlohmann::ordered_json::array();
  for (const OpSpec& op : spec.ops) {
    nlohmann::ordered_json item = {{"id", op.id}, {"type", OpTypeName(op.type)}, {"m", op.m}};
    if (!IsCollectiveOnly(op.type)) item["k"] = op.k;
    item["n"] = op.n;
    if (op.group != OpGroup::kTp) item["group"] = OpGroupName(op.group);
    if (op.row_parallel) item["parallel"] = "row";
    if (!op.after.empty()) item["after"] = op.after;
    if (!op.input.empty()) item["input"] = op.input;
    if (op.activation != Activation::kNone) item["activation"] = ActivationName(op.activation);
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
  TextTable table(
      Columns({Words({"MODEL"}), Figures({"HIDDEN", "FFN", "HEADS", "KV_HEADS", "HEAD_DIM"}),
               Words({"MLP"})}));
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
  if (options.dp < 1) {
    err << "overlapctl: graph: dp: must be at least 1 (got " << options.dp << ")\n";
    return kExitUsage;
  }
  // The tensor-parallel size: as given, else the devices given (or every
  // device of the node) split into dp replicas.
  int tp = options.tp;
  if (tp == 0) {
    const bool given = !options.devices.empty();
    absl::StatusOr<int> count =
        given ? static_cast<int>(options.devices.size()) : NodeDeviceCount(client);
    if (!count.ok()) {
      err << "overlapctl: graph: give --tp, or start overlapd so that its GPUs can be counted\n";
      return ReportCallError(count.status(), client.address(), err);
    }
    if (*count % options.dp != 0) {
      err << "overlapctl: graph: dp: " << options.dp << " replicas do not split the " << *count
          << (given ? " devices given" : " GPUs of the daemon")
          << " evenly: give --tp (each replica's tensor-parallel group)\n";
      return kExitUsage;
    }
    tp = *count / options.dp;
  }
  LayerGraphOptions layer;
  layer.tp = tp;
  layer.dp = options.dp;
  layer.seq = options.seq;
  layer.micro_batch = options.micro_batch;
  layer.layers = options.layers;
  layer.sequence_parallel = options.sequence_parallel;
  layer.pass = *pass;
  layer.grads = options.grads;
  layer.unfused = options.unfused;
  layer.dtype = *dtype;
  layer.devices = options.devices;
  layer.bucket_mib = options.bucket_mib;
  layer.chunk_kib = options.chunk_kib;
  layer.defer_bound_ms = options.defer_bound_ms;
  absl::StatusOr<Scheduler> scheduler = ParseScheduler(options.scheduler);
  if (!scheduler.ok()) {
    err << "overlapctl: graph: --scheduler: " << scheduler.status().message() << "\n";
    return kExitUsage;
  }
  layer.scheduler = *scheduler;
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
