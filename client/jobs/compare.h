// `overlapctl compare A B`: two finished jobs side by side, op by op: what each
// ran (schedule), its step and exposed communication, and by how much B is
// faster or slower than A. For an A/B of a config, a driver or NCCL upgrade, or
// two schedules of one graph (submit it twice with different modes).
//
// Ops pair up by id; ops only one job has are listed apart. Pure functions of
// the protobuf messages, like report.h.
#pragma once

#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

struct ComparedOp {
  std::string id;
  const v1::OpResult* a = nullptr;
  const v1::OpResult* b = nullptr;
  // B's step over A's: 0.9 means B took 10% less time. 0 when either is missing.
  double step_ratio = 0;
};

struct Comparison {
  std::vector<ComparedOp> ops;  // A's order, then ops only B has
  // Differences that make the numbers less comparable, one line each
  // ("dtype: bf16 -> fp16"): backend, devices, dtype, launch gate, head
  // start, NCCL's SM budget, and what the results record of the daemon
  // (overlapd, GPU model, CUDA runtime and driver, NCCL, cuBLAS, NCCL_* and
  // CUDA_* environment).
  std::vector<std::string> caveats;
  double total_a_ms = 0, total_b_ms = 0;  // over the ops both have
};

Comparison CompareJobs(const v1::Job& a, const v1::Job& b);

// The table: op | type | shape | A schedule | A step | B schedule | B step |
// B/A | A exposed | B exposed; a total over the shared ops, then the caveats.
std::string FormatComparison(const v1::Job& a, const v1::Job& b, const Comparison& c);
nlohmann::json ComparisonJson(const v1::Job& a, const v1::Job& b, const Comparison& c);
// `compare --html`: a self-contained page (client/format/html_chart.h) of the
// two jobs' ops side by side: step per op, and B's step over A's.
std::string CompareHtml(const v1::Job& a, const v1::Job& b, const Comparison& c);

}  // namespace overlap::client
