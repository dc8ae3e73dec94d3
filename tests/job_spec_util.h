// Test helpers shared by the host tests that run a deferred-gradient layer
// graph written as YAML (runner/dynamic_step_test, runner/shared_lanes_test).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "absl/status/statusor.h"
#include "common/graph_parser.h"
#include "common/graph_validator.h"
#include "overlap/v1/overlap.pb.h"

namespace overlap {

// `yaml` parsed and validated for `device_count` devices; an empty spec, and a
// test failure, when either refuses it.
inline JobSpec ValidJobSpec(const std::string& yaml, int device_count = 4) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(yaml);
  EXPECT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec.ok() &&
              ValidateJobSpec(*spec, ValidationLimits{.device_count = device_count}).ok());
  return spec.ok() ? *spec : JobSpec{};
}

// Every op verified, and the `chains` layer chains (a gradient all-reduce of
// what its wgrad GEMM wrote, checked end to end) each within its tolerance.
inline void ExpectEverythingVerified(const v1::JobResult& result, int chains) {
  for (const v1::OpResult& op : result.ops()) EXPECT_TRUE(op.verified()) << op.id();
  EXPECT_EQ(result.layer_chains_size(), chains);
  for (const v1::LayerChainCheck& c : result.layer_chains()) {
    EXPECT_LE(c.max_rel_error(), c.tolerance()) << c.chain();
  }
}

}  // namespace overlap
