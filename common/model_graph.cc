#include "common/model_graph.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/graph_validator.h"
#include "common/overlap_pass.h"
#include "common/status_macros.h"
#include "common/text.h"
#include "nlohmann/json.hpp"

namespace overlap {
namespace {

absl::Status DimError(absl::string_view dim, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(dim, ": ", message));
}

// The widths every op of the layer is built from, once the model checked out.
struct LayerWidths {
  int64_t tokens;    // T
  int64_t hidden;    // h
  int64_t kv_heads;  // kv_heads, or heads when not given
  int64_t head_dim;  // head_dim, or hidden / heads when not given
  int64_t q;         // heads x head_dim: attention's output projection's input
  int64_t qkv;       // q + 2 x kv_heads x head_dim
  int64_t fc1;       // ffn, or 2 x ffn when gated
  int64_t fc2;       // ffn
  // Between fc1 and fc2: SwiGLU for a gated MLP (its gate and up halves),
  // else GELU.
  Activation activation;
};

int64_t KvHeads(const ModelDims& model) {
  return model.kv_heads == 0 ? model.heads : model.kv_heads;
}

// bucket_mib, chunk_kib and defer_bound_ms as ParseJobSpec would take them.
absl::Status CheckLayerStep(const LayerGraphOptions& options) {
  for (const auto& [name, value] :
       {std::pair{"bucket_mib", options.bucket_mib}, std::pair{"chunk_kib", options.chunk_kib}}) {
    if (value < 0) return DimError(name, absl::StrCat("must not be negative (got ", value, ")"));
  }
  if (!std::isfinite(options.defer_bound_ms) || options.defer_bound_ms < 0) {
    return DimError("defer_bound_ms", absl::StrCat("must be a non-negative number (got ",
                                                   options.defer_bound_ms, ")"));
  }
  return absl::OkStatus();
}

// tp, dp, the name and the layer count.
absl::Status CheckShape(const ModelDims& model, const LayerGraphOptions& options) {
  const int tp = options.tp;
  if (tp < 1) return DimError("tp", absl::StrCat("must be at least 1 (got ", tp, ")"));
  const int dp = options.dp;
  if (dp < 1) return DimError("dp", absl::StrCat("must be at least 1 (got ", dp, ")"));
  if (dp > 1 && int64_t{tp} * dp > kMaxMeshDevices) {
    return DimError("dp", absl::StrCat("tp x dp = ", tp, " x ", dp, " is more than ",
                                       kMaxMeshDevices, " devices"));
  }
  // The name goes into the graph's name and a comment line of its YAML.
  // As the validator's rule for a graph's name (HasControlCharacters): the
  // graph built must pass it.
  if (model.name.empty() || HasControlCharacters(model.name)) {
    return DimError("name", "must be a non-empty line of text");
  }
  if (options.layers < 1 || options.layers > kMaxLayers) {
    return DimError("layers",
                    absl::StrCat("must be 1 to ", kMaxLayers, " (got ", options.layers, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckRanges(const ModelDims& model, const LayerGraphOptions& options) {
  // kv_heads and head_dim may be 0 (not given). kMaxModelDim is far above any
  // model's, and low enough that the widths below (products of two, times two)
  // cannot overflow before the validator checks the ops.
  struct Dim {
    const char* name;
    int64_t value;
    bool optional;
  };
  for (const Dim& dim : {Dim{"hidden", model.hidden, false}, Dim{"ffn", model.ffn, false},
                         Dim{"heads", model.heads, false}, Dim{"kv_heads", model.kv_heads, true},
                         Dim{"head_dim", model.head_dim, true}, Dim{"seq", options.seq, false},
                         Dim{"micro_batch", options.micro_batch, false}}) {
    if (dim.optional && dim.value < 0) return DimError(dim.name, "must not be negative");
    if (!dim.optional && dim.value <= 0) {
      return DimError(dim.name, absl::StrCat("must be positive (got ", dim.value, ")"));
    }
    if (dim.value > kMaxModelDim) {
      return DimError(dim.name,
                      absl::StrCat("must be at most ", kMaxModelDim, " (got ", dim.value, ")"));
    }
  }
  if (model.heads % KvHeads(model) != 0) {
    return DimError("kv_heads", absl::StrCat(model.heads, " query heads do not group evenly over ",
                                             KvHeads(model), " key/value heads"));
  }
  if (model.head_dim == 0 && model.hidden % model.heads != 0) {
    return DimError("head_dim", absl::StrCat("hidden ", model.hidden, " does not split into ",
                                             model.heads, " heads: give the head size"));
  }
  return absl::OkStatus();
}

// Each rank's share: whole heads, and the widths and tokens over tp (and dp).
absl::Status CheckSplits(const ModelDims& model, const LayerGraphOptions& options) {
  const int tp = options.tp, dp = options.dp;
  const int64_t kv_heads = KvHeads(model);
  if (model.heads % tp != 0) {
    return DimError("heads", absl::StrCat(model.heads, " query heads do not split over tp = ", tp,
                                          " (each rank computes whole heads)"));
  }
  if (kv_heads % tp != 0) {
    return DimError("kv_heads",
                    absl::StrCat(kv_heads, " key/value heads do not split over tp = ", tp,
                                 " (Megatron copies them onto each rank then, which this graph "
                                 "does not model)"));
  }
  if (model.ffn % tp != 0) {
    return DimError("ffn", absl::StrCat(model.ffn, " does not split over tp = ", tp));
  }
  if (model.hidden % tp != 0) {
    return DimError("hidden", absl::StrCat(model.hidden, " does not split over tp = ", tp));
  }
  // A gradient all-reduce's m (the hidden size) is split over its group.
  if (options.grads && options.pass != LayerPass::kForward && model.hidden % dp != 0) {
    return DimError("hidden",
                    absl::StrCat(model.hidden, " does not split over dp = ", dp,
                                 " (the gradient all-reduces split it over the replicas)"));
  }
  ASSIGN_OR_RETURN(const int64_t tokens,
                   CheckedMul(options.seq, options.micro_batch, "seq x micro_batch"));
  if (tokens % tp != 0) {
    return DimError("seq",
                    absl::StrCat(tokens, " tokens (seq x micro_batch) do not split over tp = ", tp,
                                 " (sequence parallelism and the reduce-scatters "
                                 "split them)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<LayerWidths> CheckDims(const ModelDims& model, const LayerGraphOptions& options) {
  RETURN_IF_ERROR(CheckShape(model, options));
  RETURN_IF_ERROR(CheckRanges(model, options));
  RETURN_IF_ERROR(CheckSplits(model, options));
  const int64_t kv_heads = KvHeads(model);
  const int64_t head_dim = model.head_dim == 0 ? model.hidden / model.heads : model.head_dim;
  // CheckRanges bounds each factor by kMaxModelDim, so none of these can
  // overflow today; they are checked so that raising that bound cannot make
  // one wrap silently.
  ASSIGN_OR_RETURN(const int64_t tokens,
                   CheckedMul(options.seq, options.micro_batch, "seq x micro_batch"));
  ASSIGN_OR_RETURN(const int64_t q, CheckedMul(model.heads, head_dim, "heads x head_dim"));
  ASSIGN_OR_RETURN(const int64_t kv,
                   CheckedProduct({2, kv_heads, head_dim}, "2 x kv_heads x head_dim"));
  ASSIGN_OR_RETURN(const int64_t qkv, CheckedAdd(q, kv, "qkv width (q + 2 x kv)"));
  ASSIGN_OR_RETURN(const int64_t fc1, model.gated ? CheckedMul(2, model.ffn, "ffn (2 x it, gated)")
                                                  : absl::StatusOr<int64_t>(model.ffn));
  return LayerWidths{tokens,
                     model.hidden,
                     kv_heads,
                     head_dim,
                     q,
                     qkv,
                     fc1,
                     model.ffn,
                     model.gated ? Activation::kSwiglu : Activation::kGelu};
}

// Appends ops and their notes in the order they are written.
class GraphWriter {
 public:
  explicit GraphWriter(LayerGraph* graph) : graph_(graph) {}

  // Ids of the ops added from now on start with this (each layer's its own).
  void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }

  // The op added last reads `input`'s output through `activation`.
  void WireLast(const std::string& input, Activation activation) {
    graph_->spec.ops.back().input = input;
    graph_->spec.ops.back().activation = activation;
  }

  // Returns the op's id (prefixed), for the `after` of the ops that wait on it.
  std::string Add(const std::string& name, OpType type, int64_t m, int64_t k, int64_t n,
                  std::vector<std::string> after, std::string note, OpGroup group = OpGroup::kTp) {
    const std::string id = prefix_ + name;
    OpSpec op;
    op.id = id;
    op.type = type;
    op.group = group;
    op.m = m;
    op.k = IsCollectiveOnly(type) ? 0 : k;
    op.n = n;
    after.erase(std::remove(after.begin(), after.end(), std::string()), after.end());
    op.after = std::move(after);
    graph_->spec.ops.push_back(std::move(op));
    graph_->op_notes.push_back(std::move(note));
    return id;
  }

 private:
  LayerGraph* graph_;
  std::string prefix_;
};

// Forward, its first op after `after` (empty: none): returns the last op's id.
std::string AddForward(const LayerWidths& w, bool sp, const std::string& after, GraphWriter& out) {
  const OpType column = sp ? OpType::kAgGemm : OpType::kGemm;
  const OpType row = sp ? OpType::kGemmRs : OpType::kGemmAr;
  const char* gathered = sp ? "the sequence gathered, then " : "";
  const char* reduced = sp ? "reduce-scattered" : "all-reduced";
  const std::string qkv =
      out.Add("qkv", column, w.tokens, w.hidden, w.qkv, {after},
              absl::StrCat("attention's QKV projection (column-parallel): ", gathered,
                           "[T x h] x [h x qkv/tp]"));
  const std::string proj =
      out.Add("proj", row, w.tokens, w.q, w.hidden, {qkv},
              absl::StrCat("attention's output projection (row-parallel): [T x q/tp] x [q/tp x h], "
                           "the partial sums ",
                           reduced));
  const std::string fc1 = out.Add(
      "fc1", column, w.tokens, w.hidden, w.fc1, {proj},
      absl::StrCat("the MLP's ", w.fc1 == w.fc2 ? "up projection" : "gate and up projections",
                   " (column-parallel): ", gathered, "[T x h] x [h x fc1/tp]"));
  const std::string fc2 =
      out.Add("fc2", row, w.tokens, w.fc2, w.hidden, {fc1},
              absl::StrCat("the MLP's down projection (row-parallel): its input is fc1's output "
                           "through ",
                           w.activation == Activation::kSwiglu ? "SwiGLU" : "GELU",
                           ", [T x ffn/tp] x [ffn/tp x h], the partial sums ", reduced));
  out.WireLast(fc1, w.activation);
  return fc2;
}

// The backward of one column-parallel + row-parallel pair (the MLP's fc1 and
// fc2, or attention's qkv and proj): the row-parallel op first. Returns the id
// of the op the next pair's backward waits on (the column op's data gradient).
std::string AddPairBackward(const std::string& col, const std::string& row, int64_t col_width,
                            int64_t row_width, const LayerWidths& w, const LayerGraphOptions& o,
                            const std::string& after, GraphWriter& out) {
  const bool sp = o.sequence_parallel;
  const std::string row_dgrad = out.Add(
      row + "_dgrad", sp ? OpType::kAgGemm : OpType::kGemm, w.tokens, w.hidden, row_width, {after},
      absl::StrCat(row, "'s data gradient: ", sp ? "the output gradient gathered, then " : "",
                   "dY [T x h] x W^T [h x ", row, " in/tp]"));
  const std::string row_wgrad =
      out.Add(row + "_wgrad", OpType::kGemm, w.hidden, w.tokens, row_width, {row_dgrad},
              absl::StrCat(row, "'s weight gradient, transposed: dY^T [h x T] x X [T x ", row,
                           " in/tp]", sp ? " (dY as gathered above)" : ""));
  std::string input_gather;
  if (sp) {
    input_gather =
        out.Add(col + "_x_gather", OpType::kAllGather, w.tokens, 0, w.hidden, {row_dgrad},
                absl::StrCat(col,
                             "'s input gathered again for its weight gradient (sequence "
                             "parallelism kept only this rank's rows of it)"));
  }
  const std::string col_dgrad = out.Add(
      col + "_dgrad", sp ? OpType::kGemmRs : OpType::kGemmAr, w.tokens, col_width, w.hidden,
      {row_dgrad},
      absl::StrCat(col, "'s data gradient: dY [T x ", col, " out/tp] x W^T, the partial sums ",
                   sp ? "reduce-scattered" : "all-reduced"));
  const std::string col_wgrad = out.Add(
      col + "_wgrad", OpType::kGemm, w.hidden, w.tokens, col_width, {col_dgrad, input_gather},
      absl::StrCat(col, "'s weight gradient, transposed: X^T [h x T] x dY [T x ", col, " out/tp]"));
  if (o.grads) {
    for (const auto& [name, width, wgrad] :
         {std::tuple{row, row_width, row_wgrad}, std::tuple{col, col_width, col_wgrad}}) {
      const bool across = o.dp > 1;
      out.Add(name + "_grads", OpType::kAllReduce, w.hidden, 0, width / o.tp, {wgrad},
              across ? absl::StrCat(name,
                                    "'s weight gradient (this tp rank's shard) all-reduced "
                                    "across the ",
                                    o.dp,
                                    " data-parallel replicas, the gradient itself as its "
                                    "input; nothing waits on it: the layer step defers it "
                                    "beside the backward that follows, chunked or whole")
                     : absl::StrCat(name,
                                    "'s weight gradient (this rank's shard) all-reduced, a "
                                    "stand-in for data parallelism that nothing here waits on"),
              across ? OpGroup::kDp : OpGroup::kTp);
      if (across) out.WireLast(wgrad, Activation::kNone);
    }
  }
  return col_dgrad;
}

std::string GraphName(const ModelDims& model, const LayerGraphOptions& o) {
  const char* pass = o.pass == LayerPass::kForward    ? ""
                     : o.pass == LayerPass::kBackward ? "-backward"
                                                      : "-forward-backward";
  const std::string layers = o.layers > 1 ? absl::StrCat("-", o.layers, "-layers") : "-layer";
  return absl::StrCat(model.name, layers, pass, o.sequence_parallel ? "" : "-nosp", "-tp", o.tp,
                      o.dp > 1 ? absl::StrCat("-dp", o.dp) : "");
}

std::vector<std::string> Header(const ModelDims& model, const LayerGraphOptions& o,
                                const LayerWidths& w) {
  const char* pass = o.pass == LayerPass::kForward    ? "forward"
                     : o.pass == LayerPass::kBackward ? "backward"
                                                      : "forward and backward";
  std::vector<std::string> lines = {
      o.layers > 1
          ? absl::StrCat(o.layers, " ", model.name, " decoder layers' tensor-parallel ops, ", pass,
                         "; layer l's ops are named l<l>.*")
          : absl::StrCat("One ", model.name, " decoder layer's tensor-parallel ops, ", pass, "."),
      absl::StrCat("hidden h = ", w.hidden, ", ", model.heads, " query heads and ", w.kv_heads,
                   " key/value heads of ", w.head_dim, " (q = ", w.q, ", qkv = ", w.qkv,
                   "), ffn = ", w.fc2,
                   model.gated ? " (gated: fc1 = 2 x ffn = " : " (fc1 = ", w.fc1, ")"),
      absl::StrCat("T = ", w.tokens, " tokens (seq ", o.seq, " x micro-batch ", o.micro_batch,
                   "), tp = ", o.tp, ", ",
                   o.sequence_parallel ? "sequence parallel" : "no sequence parallelism")};
  if (o.dp > 1) {
    lines.push_back(absl::StrCat(
        "mesh: tp ", o.tp, " x dp ", o.dp, " (", o.tp * o.dp,
        " GPUs): each replica's tp group runs the layer",
        o.grads ? "; the gradient all-reduces run across the replicas (group dp)." : "."));
  }
  if (o.dtype == DType::kFP8) {
    lines.push_back(
        "fp8: E4M3 GEMM inputs, gathered in fp8; GEMM outputs, reduce-scatters and gradient "
        "all-reduces in bf16.");
  }
  lines.push_back(
      "Wired: fc2 reads fc1's output through the activation (checked end to end against "
      "float64). Not wired: qkv -> proj (the attention core between them is left out, as are "
      "the norms, which move nothing across GPUs) and the backward's GEMMs: they keep inputs of "
      "their own.");
  if (o.grads && o.dp > 1 && o.pass != LayerPass::kForward) {
    lines.push_back(
        "Each gradient all-reduce across the replicas sums its weight gradient (input: *_wgrad).");
  }
  return lines;
}

// The graph's fused ops as their collectives and GEMMs, each with a note.
void Unfuse(LayerGraph& graph) {
  std::vector<size_t> origin;
  JobSpec unfused = UnfuseCollectives(graph.spec, &origin);
  std::vector<std::string> notes;
  for (size_t i = 0; i < unfused.ops.size(); ++i) {
    const OpSpec& op = unfused.ops[i];
    const OpSpec& from = graph.spec.ops[origin[i]];
    if (op.id == from.id) {
      notes.push_back(graph.op_notes[origin[i]]);
    } else {
      notes.push_back(absl::StrCat(from.id, "'s ", OpTypeName(op.type),
                                   " alone (the overlap pass fuses it back into ", from.id, ", ",
                                   OpTypeName(from.type), ")"));
    }
  }
  graph.spec = std::move(unfused);
  graph.op_notes = std::move(notes);
  graph.spec.name += "-unfused";
  graph.header.push_back(
      "Unfused: each overlapped op written as its plain collective and its GEMM, as a "
      "framework's trace has them; the daemon fuses them back (fuse: false keeps them).");
}

// The devices the graph names: those given, else the first tp of the node when
// there is no mesh. A graph without devices runs on every device of the daemon
// that takes it, so a tp 2 graph would run at tp 4 on a 4-device daemon. With
// a mesh (dp > 1) the mesh says how many devices the graph needs and the
// daemon refuses any other count, on one node or across several (where each
// node brings its own devices), so none are named.
std::vector<int> WrittenDevices(const LayerGraphOptions& options) {
  if (!options.devices.empty() || options.dp > 1) return options.devices;
  std::vector<int> devices(options.tp);
  for (int d = 0; d < options.tp; ++d) devices[d] = d;
  return devices;
}

}  // namespace

const std::vector<ModelDims>& ModelPresets() {
  // name, hidden, ffn, heads, kv_heads, head_dim, gated
  static const std::vector<ModelDims> kPresets = {
      {"llama3-8b", 4096, 14336, 32, 8, 128, true},
      {"llama3-70b", 8192, 28672, 64, 8, 128, true},
      {"llama3-405b", 16384, 53248, 128, 8, 128, true},
      {"qwen2.5-72b", 8192, 29568, 64, 8, 128, true},
      {"gpt3-175b", 12288, 49152, 96, 96, 128, false},
  };
  return kPresets;
}

absl::StatusOr<ModelDims> FindModelPreset(absl::string_view name) {
  std::vector<std::string> names;
  for (const ModelDims& model : ModelPresets()) {
    if (model.name == name) return model;
    names.push_back(model.name);
  }
  return absl::InvalidArgumentError(absl::StrCat("model: unknown \"", name,
                                                 "\" (known: ", absl::StrJoin(names, ", "),
                                                 "; or give --hidden, --ffn and --heads)"));
}

absl::StatusOr<LayerPass> ParseLayerPass(absl::string_view name) {
  if (name == "forward") return LayerPass::kForward;
  if (name == "backward") return LayerPass::kBackward;
  if (name == "both") return LayerPass::kBoth;
  return absl::InvalidArgumentError(
      absl::StrCat("pass: unknown \"", name, "\" (forward, backward or both)"));
}

absl::StatusOr<LayerGraph> BuildLayerGraph(const ModelDims& model,
                                           const LayerGraphOptions& options) {
  ASSIGN_OR_RETURN(const LayerWidths widths, CheckDims(model, options));
  RETURN_IF_ERROR(CheckLayerStep(options));
  const int device_count = options.tp * options.dp;
  if (!options.devices.empty() && static_cast<int>(options.devices.size()) != device_count) {
    return DimError(
        "devices",
        options.dp > 1
            ? absl::StrCat(options.devices.size(), " devices given for tp x dp = ", options.tp,
                           " x ", options.dp, " = ", device_count)
            : absl::StrCat(options.devices.size(), " devices given for tp = ", options.tp));
  }
  if (options.grads && options.pass == LayerPass::kForward) {
    return DimError("grads", "weight gradients come with the backward pass (backward or both)");
  }
  LayerGraph graph;
  graph.spec.name = GraphName(model, options);
  graph.spec.devices = WrittenDevices(options);
  if (options.dp > 1) graph.spec.mesh = Mesh{options.tp, options.dp};
  graph.spec.dtype = options.dtype;
  graph.spec.bucket_mib = options.bucket_mib;
  graph.spec.chunk_kib = options.chunk_kib;
  graph.spec.defer_bound_ms = options.defer_bound_ms;
  graph.spec.scheduler = options.scheduler;
  graph.header = Header(model, options, widths);
  GraphWriter out(&graph);
  // Layer l's ops are "l<l>.qkv", ...; the forward runs the layers up, the
  // backward down, each layer after the one before it.
  const auto prefix = [&](int layer) {
    out.set_prefix(options.layers > 1 ? absl::StrCat("l", layer, ".") : "");
  };
  std::string last;
  if (options.pass != LayerPass::kBackward) {
    for (int layer = 0; layer < options.layers; ++layer) {
      prefix(layer);
      last = AddForward(widths, options.sequence_parallel, last, out);
    }
  }
  if (options.pass != LayerPass::kForward) {
    for (int layer = options.layers - 1; layer >= 0; --layer) {
      prefix(layer);
      last = AddPairBackward("fc1", "fc2", widths.fc1, widths.fc2, widths, options, last, out);
      last = AddPairBackward("qkv", "proj", widths.qkv, widths.q, widths, options, last, out);
    }
  }
  if (options.unfused) Unfuse(graph);
  ValidationLimits limits;
  limits.device_count = options.devices.empty()
                            ? device_count
                            : *std::max_element(options.devices.begin(), options.devices.end()) + 1;
  if (const absl::StatusOr<std::vector<int>> group = ValidateJobSpec(graph.spec, limits);
      !group.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the graph for ", model.name, " does not hold: ", group.status().message()));
  }
  return graph;
}

std::string LayerGraphYaml(const LayerGraph& graph) {
  std::string out;
  for (const std::string& line : graph.header) absl::StrAppend(&out, "# ", line, "\n");
  const JobSpec& spec = graph.spec;
  // A plain name as it is; any other as a JSON string, which YAML reads the same.
  const bool plain =
      !spec.name.empty() && std::all_of(spec.name.begin(), spec.name.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.';
      });
  absl::StrAppend(&out, "name: ", plain ? spec.name : nlohmann::json(spec.name).dump(), "\n");
  if (!spec.devices.empty()) {
    absl::StrAppend(&out, "devices: [", absl::StrJoin(spec.devices, ", "), "]\n");
  }
  if (spec.mesh.declared()) {
    absl::StrAppend(&out, "mesh: {tp: ", spec.mesh.tp, ", dp: ", spec.mesh.dp, "}\n");
  }
  absl::StrAppend(&out, "dtype: ", DTypeName(spec.dtype), "\n", "iterations: ", spec.iterations,
                  "\n", "warmup: ", spec.warmup, "\n");
  const JobSpec defaults;
  if (spec.bucket_mib != defaults.bucket_mib) {
    absl::StrAppend(&out, "bucket_mib: ", spec.bucket_mib, "\n");
  }
  if (spec.chunk_kib != defaults.chunk_kib) {
    absl::StrAppend(&out, "chunk_kib: ", spec.chunk_kib, "\n");
  }
  if (spec.defer_bound_ms != defaults.defer_bound_ms) {
    // JSON's number form: the shortest that reads back as the same double.
    absl::StrAppend(&out, "defer_bound_ms: ", nlohmann::json(spec.defer_bound_ms).dump(), "\n");
  }
  if (spec.scheduler != defaults.scheduler) {
    absl::StrAppend(&out, "scheduler: ", SchedulerName(spec.scheduler), "\n");
  }
  absl::StrAppend(&out, "ops:\n");
  for (size_t i = 0; i < spec.ops.size(); ++i) {
    const OpSpec& op = spec.ops[i];
    absl::StrAppend(&out, "  # ", graph.op_notes[i], "\n", "  - {id: ", op.id,
                    ", type: ", OpTypeName(op.type), ", m: ", op.m);
    if (!IsCollectiveOnly(op.type)) absl::StrAppend(&out, ", k: ", op.k);
    absl::StrAppend(&out, ", n: ", op.n);
    if (op.group != OpGroup::kTp) absl::StrAppend(&out, ", group: ", OpGroupName(op.group));
    if (op.row_parallel) absl::StrAppend(&out, ", parallel: row");
    // `input` implies `after`: only the other ops it waits on are listed.
    std::vector<std::string> after = op.after;
    after.erase(std::remove(after.begin(), after.end(), op.input), after.end());
    if (!after.empty()) absl::StrAppend(&out, ", after: [", absl::StrJoin(after, ", "), "]");
    if (!op.input.empty()) absl::StrAppend(&out, ", input: ", op.input);
    if (op.activation != Activation::kNone) {
      absl::StrAppend(&out, ", activation: ", ActivationName(op.activation));
    }
    absl::StrAppend(&out, "}\n");
  }
  return out;
}

}  // namespace overlap
