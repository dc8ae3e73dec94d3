// The float64 reference of a chain: ops whose input is another op's output
// (OpSpec::input), computed from the seeded inputs of the chain's first ops
// through every GEMM, collective and activation, each tensor that a device
// stores in between rounded as it stores it (its output's dtype, then the
// next input's, with the chain's fp8 scale), so that a check of the last op
// covers the whole chain and not only its last step.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "common/graph.h"
#include "server/ops/op_context.h"
#include "server/ops/reference.h"

namespace overlap::ops {

class ChainReference {
 public:
  // `device_count`: the job's devices (positions 0..count-1, node-major).
  ChainReference(const JobSpec& spec, int device_count);

  // Whether op `index` reads another op's output.
  bool IsWired(int index) const { return !spec_.ops[index].input.empty(); }

  // Checks `ctx`'s outputs (the layer step's context of op `index`, its ranks
  // group-major, after an iteration that poisoned them first) against the
  // chain, on this daemon's ranks: every output element written, then up to
  // `max_rows` rows per rank, every column. FAILED_PRECONDITION for an element
  // not written.
  absl::StatusOr<Verification> Verify(int index, OpContext& ctx, int max_rows = 12);

  // What Verify's error may reach at op `index`: its own OutputTolerance
  // plus what the ops before it in the chain may have handed on, each
  // scaled by the activation between (docs/GRAPHS.md, "Chains").
  double Tolerance(int index) const;

 private:
  // One output row of an op on a device position.
  using RowKey = std::tuple<int, int, int64_t>;  // op, position, local row
  struct Place {
    int group = 0;  // of the op's groups
    int rank = 0;   // in the group
  };
  Place PlaceOf(int op, int position) const;
  int PositionOf(int op, int group, int rank) const;
  int SizeOf(int op) const;

  // One contribution to an output row: input row `row` of rank `rank` (of the
  // row's group), times that rank's W where the op has a GEMM.
  struct Term {
    int rank;
    int64_t row;
  };
  std::vector<Term> TermsOf(int op, const Place& place, int64_t row) const;

  // Adds what the rows need, back to the chain's seeded inputs.
  void Request(int op, int position, const std::vector<int64_t>& rows);
  // Computes every requested row, in dependency order.
  absl::Status ComputeRequested();
  void ComputeRows(int op, int position, const std::set<int64_t>& rows);
  // Input row `row` of op's rank (place) as the device reads it.
  std::vector<double> InputRow(int op, int group, int rank, int64_t row) const;

  JobSpec spec_;
  int device_count_;
  std::map<std::string, int> index_of_;
  std::vector<int> order_;  // topological
  std::map<std::pair<int, int>, std::set<int64_t>> requested_;
  std::map<RowKey, std::vector<double>> rows_;  // float64, not rounded
};

}  // namespace overlap::ops
