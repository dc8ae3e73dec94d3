// Layer graphs from a transformer's dimensions: the tensor-parallel ops of one
// decoder layer as Megatron-LM runs them, so that a user times their own
// model's shapes without working out m, k and n for every op.
//
// T = sequence x micro-batch tokens, h = hidden, q = heads x head_dim,
// kv = kv_heads x head_dim, f = the MLP's intermediate size (2f wide for fc1
// when the MLP is gated, as SwiGLU's gate and up projections are one GEMM).
// With sequence parallelism (the default), forward:
//   qkv  ag_gemm  m T, k h, n q + 2kv   (column-parallel: the sequence gathered)
//   proj gemm_rs  m T, k q, n h         (row-parallel: partials reduce-scattered)
//   fc1  ag_gemm  m T, k h, n f or 2f
//   fc2  gemm_rs  m T, k f, n h
// and backward, the MLP first: each row-parallel op's data gradient gathers the
// output gradient (ag_gemm), each column-parallel one's reduce-scatters its
// partial (gemm_rs), the weight gradients are `gemm`s written transposed
// (dW^T = dY^T x X: m h, k T, n the weight's split width), and the input of
// each column-parallel op is gathered again for its weight gradient
// (all_gather, beside the GEMMs before it). Without sequence parallelism the
// column-parallel ops are `gemm`s and the row-parallel ones `gemm_ar`. The
// attention core, norms and activations move nothing across GPUs and are left
// out: the graph is the layer's GEMMs and their communication.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/checked_size.h"
#include "common/dtype.h"
#include "common/graph.h"

namespace overlap {

struct ModelDims {
  std::string name = "custom";  // a preset's name, or custom
  int64_t hidden = 0;
  int64_t ffn = 0;       // the MLP's intermediate size
  int64_t heads = 0;     // query heads
  int64_t kv_heads = 0;  // key/value heads (grouped-query attention); 0 = heads
  int64_t head_dim = 0;  // 0 = hidden / heads
  bool gated = true;     // SwiGLU-style MLP: fc1 is 2 x ffn wide
};

// Decoder layers of public models (Llama 3, Qwen 2.5, GPT-3), by name.
const std::vector<ModelDims>& ModelPresets();
// INVALID_ARGUMENT naming the presets when `name` is none of them.
absl::StatusOr<ModelDims> FindModelPreset(absl::string_view name);

enum class LayerPass { kForward, kBackward, kBoth };
absl::StatusOr<LayerPass> ParseLayerPass(absl::string_view name);  // forward | backward | both

// More layers than this would only repeat what a few show, at a memory cost:
// a layer step holds every op's buffers at once.
inline constexpr int kMaxLayers = 16;
// The largest dimension (hidden, ffn, heads, seq, ...) a model may give.
inline constexpr int64_t kMaxModelDim = int64_t{1} << 24;

// The most devices a graph's mesh (tp x dp) may span: the validator's bound.
inline constexpr int kMaxMeshDevices = kMaxMeshRanks;

struct LayerGraphOptions {
  int tp = 0;  // the tensor-parallel group's size, at least 1
  // Data-parallel replicas, each a tp group of its own. Above 1 the graph
  // declares mesh {tp, dp} over tp x dp devices, its layer ops run on every
  // replica's tp group at once, and the gradient all-reduces (grads) run over
  // group dp: each tp rank's shard summed across the replicas. At 1, no mesh.
  int dp = 1;
  // Decoder layers, one after another (backward in reverse): with more than
  // one, a layer's deferred gradient all-reduces run beside the next layer's
  // backward, as in training.
  int layers = 1;
  int64_t seq = 8192;
  int64_t micro_batch = 1;
  bool sequence_parallel = true;
  LayerPass pass = LayerPass::kForward;
  // Backward: a data-parallel all-reduce of each weight gradient (this rank's
  // shard; over group dp with dp > 1, else over the TP group's GPUs as a
  // stand-in for the data-parallel group), which nothing in the layer waits
  // on: the layer step defers and buckets (or chunks) them.
  bool grads = false;
  // Write each ag_gemm, gemm_rs and gemm_ar as its plain collective and its
  // GEMM, wired, as a framework's trace has them (common/overlap_pass.h): the
  // daemon's overlap pass fuses them back.
  bool unfused = false;
  DType dtype = DType::kBF16;
  // The devices the graph runs on, tp x dp of them. Empty: devices 0..tp-1
  // are written (dp 1), or none when the mesh (dp > 1) says how many it needs;
  // either way the graph never runs over more devices than its tp assumed.
  std::vector<int> devices;
  // JobSpec's layer-step settings, written to the graph as given.
  int bucket_mib = JobSpec().bucket_mib;
  int chunk_kib = JobSpec().chunk_kib;
  double defer_bound_ms = JobSpec().defer_bound_ms;
  Scheduler scheduler = JobSpec().scheduler;
};

struct LayerGraph {
  JobSpec spec;
  std::vector<std::string> header;    // what the graph is, a line each
  std::vector<std::string> op_notes;  // what each op computes, parallel to spec.ops
};

// INVALID_ARGUMENT naming the dimension when the model does not split over tp
// (heads, kv_heads, ffn, hidden or the tokens) or its gradients over dp
// (hidden), or when the graph would not pass graph_validator.
absl::StatusOr<LayerGraph> BuildLayerGraph(const ModelDims& model,
                                           const LayerGraphOptions& options);

// The graph as a YAML document that overlapctl submit takes, commented: it
// parses back (ParseJobSpec) to graph.spec. Layer-step settings at their
// defaults are left out.
std::string LayerGraphYaml(const LayerGraph& graph);

}  // namespace overlap
