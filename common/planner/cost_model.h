// What one GEMM and one transfer cost, from a calibration with what-if
// changes applied, each change written down as an assumption beside the
// figures it moves.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/planner/calibration.h"

namespace overlap::planner {

// Questions about hardware the calibration was not measured on.
struct WhatIf {
  std::optional<int> tp;               // another tensor-parallel degree
  std::optional<double> link_gbps;     // every intra-node transport's bus bandwidth (nvlink-gbps)
  std::optional<double> gemm_tflops;   // a large GEMM's sustained throughput
  std::optional<int> nodes;            // data-parallel replicas on separate nodes
  std::optional<double> inter_node_gbps;  // the bus bandwidth between nodes
  bool any() const { return tp || link_gbps || gemm_tflops || nodes || inter_node_gbps; }
};

class CostModel {
 public:
  CostModel(const Calibration& calibration, const WhatIf& what_if);

  const Calibration& calibration() const { return calibration_; }
  const WhatIf& what_if() const { return what_if_; }

  // One rank's GEMM [m, k] x [k, n].
  absl::StatusOr<double> GemmMs(int64_t m, int64_t n, int64_t k) const;
  // A collective of `bytes` (its whole buffer) among `ranks` ranks on
  // `nodes` nodes: one node's transports as calibrated; across nodes the
  // link between them bounds it (its latency plus the bytes at its bus
  // bandwidth), NOT_FOUND when no link was measured or asked for.
  absl::StatusOr<double> TransferMs(Collective collective, Transport transport, int64_t bytes,
                                    int ranks, int nodes = 1) const;
  // The same moved as copies stream it, without a collective's own latency:
  // its bytes at the best bus bandwidth the curve reached (copy engines
  // inside an op, and pieces cut from one).
  absl::StatusOr<double> StreamMs(Collective collective, Transport transport, int64_t bytes,
                                  int ranks, int nodes = 1) const;
  // `collective` of `bytes` among `ranks` ranks spread over nodes: the link
  // between nodes bounds it.
  absl::StatusOr<double> InterNodeMs(Collective collective, int64_t bytes, int ranks) const;
  // GEMM time beside `transport`'s transfers over GEMM time alone (1 when
  // the calibration has no figure, which Assumptions then says).
  double Slowdown(Transport transport) const;
  double PieceOverheadMs() const { return calibration_.piece_overhead_ms; }

  // Every assumption the figures rest on beyond what was measured, in words.
  std::vector<std::string> Assumptions() const;

 private:
  Calibration calibration_;
  WhatIf what_if_;
  double gemm_scale_ = 1;  // what_if.gemm_tflops against the calibration's best
  double calibrated_tflops_ = 0;
};

}  // namespace overlap::planner
