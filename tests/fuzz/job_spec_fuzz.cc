// Fuzz target: a layer graph as a user or a peer submits it. ParseJobSpec,
// then ValidateJobSpec as SubmitJob does (on 8 devices, and on 3 without the
// library's all-reduce algorithms, as on another backend). Every refusal must
// be INVALID_ARGUMENT; a graph that passes must name devices the node has, its
// ops' groups must hold those devices once each, and
// the overlap pass must turn it into a valid graph with no more ops, as
// admission relies on.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/graph_parser.h"
#include "common/graph_validator.h"
#include "common/overlap_pass.h"
#include "tests/fuzz/fuzz_check.h"

namespace overlap::fuzz {
namespace {

void Validate(const JobSpec& spec, int device_count, bool library_algorithms) {
  ValidationLimits limits;
  limits.device_count = device_count;
  limits.library_algorithms = library_algorithms;
  const absl::StatusOr<std::vector<int>> devices = ValidateJobSpec(spec, limits);
  if (!devices.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(devices.status()));
    return;
  }
  FUZZ_CHECK(!devices->empty());
  for (int device : *devices) FUZZ_CHECK(device >= 0 && device < device_count);
  // Each op's groups hold the job's devices once each: a mesh whose tp x dp
  // wrapped to the device count passed here once and built 715827883 groups.
  for (const OpSpec& op : spec.ops) {
    size_t positions = 0;
    for (const auto& group : GroupsOf(spec.mesh, op.group, static_cast<int>(devices->size()))) {
      positions += group.size();
    }
    FUZZ_CHECK(positions == devices->size());
  }
  const absl::StatusOr<std::vector<int>> order = TopologicalOrder(spec);
  FUZZ_CHECK(order.ok() && order->size() == spec.ops.size());
  const JobSpec fused = FuseCollectives(spec);
  FUZZ_CHECK(fused.ops.size() <= spec.ops.size());
  FUZZ_CHECK(ValidateJobSpec(fused, limits).ok());
}

}  // namespace
}  // namespace overlap::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace overlap;
  const absl::StatusOr<JobSpec> spec = ParseJobSpec(fuzz::Text(data, size), "fuzz");
  if (!spec.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(spec.status()));
    return 0;
  }
  fuzz::Validate(*spec, 8, true);
  fuzz::Validate(*spec, 3, false);
  return 0;
}
