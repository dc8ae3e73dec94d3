// Fuzz target: a model's Hugging Face config.json as `overlapctl graph
// --config` reads it (ModelFromHfConfig). A refusal must be INVALID_ARGUMENT.
// From a model that is read, the layer graph built for it (forward and
// backward at tp 2; two layers with gradients at tp 2 x dp 2), when the model
// splits that way, must pass the validator, and the YAML written from it must
// parse back to the same graph.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/graph_parser.h"
#include "common/graph_validator.h"
#include "common/hf_config.h"
#include "common/model_graph.h"
#include "tests/fuzz/fuzz_check.h"

namespace overlap::fuzz {
namespace {

bool SameOps(const JobSpec& a, const JobSpec& b) {
  if (a.ops.size() != b.ops.size()) return false;
  for (size_t i = 0; i < a.ops.size(); ++i) {
    const OpSpec& x = a.ops[i];
    const OpSpec& y = b.ops[i];
    if (x.id != y.id || x.type != y.type || x.m != y.m || x.k != y.k || x.n != y.n ||
        x.group != y.group || x.after != y.after) {
      return false;
    }
  }
  return true;
}

void CheckGraph(const ModelDims& model, const LayerGraphOptions& options) {
  const absl::StatusOr<LayerGraph> graph = BuildLayerGraph(model, options);
  if (!graph.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(graph.status()));
    return;
  }
  ValidationLimits limits;
  limits.device_count = options.tp * options.dp;
  FUZZ_CHECK(ValidateJobSpec(graph->spec, limits).ok());
  const absl::StatusOr<JobSpec> parsed = ParseJobSpec(LayerGraphYaml(*graph), "fuzz");
  FUZZ_CHECK(parsed.ok());
  FUZZ_CHECK(parsed->name == graph->spec.name);
  FUZZ_CHECK(parsed->mesh.tp == graph->spec.mesh.tp && parsed->mesh.dp == graph->spec.mesh.dp);
  FUZZ_CHECK(SameOps(*parsed, graph->spec));
}

}  // namespace
}  // namespace overlap::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace overlap;
  const absl::StatusOr<ModelDims> model = ModelFromHfConfig(fuzz::Text(data, size), "fuzz");
  if (!model.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(model.status()));
    return 0;
  }
  LayerGraphOptions both;
  both.tp = 2;
  both.seq = 64;
  both.pass = LayerPass::kBoth;
  fuzz::CheckGraph(*model, both);
  LayerGraphOptions mesh;
  mesh.tp = 2;
  mesh.dp = 2;
  mesh.layers = 2;
  mesh.seq = 128;
  mesh.pass = LayerPass::kBackward;
  mesh.grads = true;
  fuzz::CheckGraph(*model, mesh);
  return 0;
}
