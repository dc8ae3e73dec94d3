// libFuzzer target for what the daemon parses from its callers and its
// operators: a submitted layer graph (parsed, then validated as SubmitJob
// does), the daemon's config, and a byte size as its keys and overlapctl's
// flags take one; and what `overlapctl graph --config` reads, a model's
// config.json, through to the graph it writes. Any input must come back as a Status; a crash, a
// sanitizer report, a hang or a size that does not survive its own formatting is a bug. Built with
// -DOVERLAP_BUILD_FUZZERS=ON and clang (scripts/run-sanitizers.sh fuzz).
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/byte_size.h"
#include "common/config.h"
#include "common/graph_parser.h"
#include "common/graph_validator.h"
#include "common/hf_config.h"
#include "common/model_graph.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<overlap::JobSpec> spec = overlap::ParseJobSpec(text, "fuzz");
  if (spec.ok()) {
    overlap::ValidationLimits limits;
    limits.device_count = 8;
    (void)overlap::ValidateJobSpec(*spec, limits);
  }
  (void)overlap::ParseDaemonConfig(text);
  // A model's config.json: the layer graph written from it must parse back to
  // itself and pass the validator.
  absl::StatusOr<overlap::ModelDims> model = overlap::ModelFromHfConfig(text, "fuzz");
  if (model.ok()) {
    overlap::LayerGraphOptions options;
    options.tp = 2;
    options.seq = 64;
    options.pass = overlap::LayerPass::kBoth;
    absl::StatusOr<overlap::LayerGraph> graph = overlap::BuildLayerGraph(*model, options);
    if (graph.ok()) {
      absl::StatusOr<overlap::JobSpec> parsed =
          overlap::ParseJobSpec(overlap::LayerGraphYaml(*graph), "fuzz");
      if (!parsed.ok() || parsed->ops.size() != graph->spec.ops.size() ||
          parsed->name != graph->spec.name) {
        __builtin_trap();
      }
    }
  }
  absl::StatusOr<int64_t> bytes = overlap::ParseByteSize(text);
  if (bytes.ok()) {
    absl::StatusOr<int64_t> again = overlap::ParseByteSize(overlap::FormatByteSize(*bytes));
    if (!again.ok() || *again != *bytes) __builtin_trap();
    (void)overlap::FormatBytes(*bytes);
  }
  return 0;
}
