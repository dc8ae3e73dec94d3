// `overlapctl graph`: a layer graph from a model's dimensions
// (common/model_graph.h), as YAML to submit or bench, or the known models.
//
//   overlapctl graph --model llama3-70b --tp 2 | overlapctl submit - --wait
//   overlapctl graph --hidden 5120 --ffn 13824 --heads 40 --pass both --output-file layer.yaml
//   overlapctl graph --model llama3-8b --tp 2 | overlapctl bench --graph -
//   overlapctl graph --model llama3-8b --tp 2 --dp 2 --pass backward --grads
#pragma once

#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "client/core/daemon_client.h"
#include "common/model_graph.h"

namespace overlap::client {

struct GraphCommandOptions {
  std::string model;   // a preset's name; empty: the dimensions below make the model
  std::string config;  // a Hugging Face config.json (hf_config.h) instead of a preset
  std::string name;    // the model's name in the graph's (default: the preset's, model_type)
  ModelDims dims;      // each one given (non-zero) wins over the preset's
  std::string mlp;     // gated | plain; empty: the preset's (gated for a custom model)
  int tp = 0;          // 0: the --devices given, else every device the daemon has, over dp
  int dp = 1;          // data-parallel replicas; above 1 the graph declares a tp x dp mesh
  int64_t seq = 8192;
  int64_t micro_batch = 1;
  int layers = 1;
  bool sequence_parallel = true;
  std::string pass = "forward";  // forward | backward | both
  bool grads = false;
  bool unfused = false;  // LayerGraphOptions::unfused
  std::string dtype = "bf16";
  std::vector<int> devices;
  int bucket_mib = JobSpec().bucket_mib;  // the graph's layer-step settings
  int chunk_kib = JobSpec().chunk_kib;
  double defer_bound_ms = JobSpec().defer_bound_ms;
  std::string scheduler = "static";
  std::string output;  // a file; empty: standard output
  bool list_models = false;
};

// The model the options name: a preset, a config.json's, a custom one, or
// either of the first two with some dimensions changed (named "<name>-custom").
// INVALID_ARGUMENT when a custom model lacks hidden, ffn or heads, the preset
// is unknown, the config does not hold a dense model, or both a preset and a
// config are given; NOT_FOUND when the config cannot be read.
absl::StatusOr<ModelDims> ResolveModel(const GraphCommandOptions& options);

// The graph as JSON (the same document as the YAML; submit takes either).
std::string LayerGraphJson(const LayerGraph& graph);

// The known models as a table (or JSON).
std::string FormatModelPresets(bool json);

// Prints the graph (or with list_models, the presets); asks `client` for the
// node's device count only when neither tp nor devices are given. Without tp,
// the devices (given, or the node's) are split into dp replicas: a usage error
// when dp does not divide them.
int RunGraph(DaemonClient& client, const GraphCommandOptions& options, bool json, std::ostream& out,
             std::ostream& err);

}  // namespace overlap::client
