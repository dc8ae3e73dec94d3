// Parses a job spec (the layer graph a client submits) from YAML or JSON text.
//
//   name: llama70b-mlp-tp2
//   devices: [0, 1]      # the TP group; omitted = every device of the backend
//   dtype: bf16          # fp32 | fp16 | bf16
//   iterations: 20
//   warmup: 5
//   verify: true
//   priority: 0          # higher runs first
//   seed: 1234
//   ops:
//     - {id: fc1, type: ag_gemm, m: 8192, k: 8192, n: 28672, mode: chunked, chunks: 4}
//     - {id: fc2, type: gemm_rs, m: 8192, k: 28672, n: 8192, after: [fc1], transport: p2p}
//
// Only syntax and types are checked here (unknown fields, integers that are not
// integers, unknown enum names); graph_validator checks shapes, devices and the
// dependency graph. Thread-safe; never throws.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/graph.h"
#include "common/parse_budget.h"

namespace overlap {

// INVALID_ARGUMENT with a one-line message naming the field path, e.g.
// `ops[1].chunks: must be a positive integer (got "abc")`, or the line and column
// of a syntax error; prefixed with "<source_name>: " when source_name is given.
// The text is pre-scanned before yaml-cpp sees it (yaml_util::LoadDocument).
// With a `budget`, the parse holds its estimated memory of it while it runs
// (RESOURCE_EXHAUSTED when there is no room in time): a daemon passes one
// budget for every parse it makes, so that specs parsed at once share it.
absl::StatusOr<JobSpec> ParseJobSpec(absl::string_view text, absl::string_view source_name = "",
                                     ParseBudget* budget = nullptr);

// How many times this process has called ParseJobSpec, whatever the outcome:
// the daemon parses a job's graph once and hands the typed graph on, so this
// grows by one a job (overlapd_graphs_parsed_total).
int64_t GraphsParsed();

}  // namespace overlap
