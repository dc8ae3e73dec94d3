#include "common/planner/cost_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace overlap::planner {

namespace {

// bytes / (GB/s) in ms.
double BandwidthMs(double bytes, double gbps) { return bytes / (gbps * 1e6); }

}  // namespace

CostModel::CostModel(const Calibration& calibration, const WhatIf& what_if)
    : calibration_(calibration), what_if_(what_if) {
  for (const GemmPoint& g : calibration_.gemms) {
    calibrated_tflops_ = std::max(calibrated_tflops_, 2.0 * g.m * g.n * g.k / (g.ms * 1e9));
  }
  if (what_if_.gemm_tflops && calibrated_tflops_ > 0) {
    gemm_scale_ = calibrated_tflops_ / *what_if_.gemm_tflops;
  }
}

absl::StatusOr<double> CostModel::GemmMs(int64_t m, int64_t n, int64_t k) const {
  absl::StatusOr<double> ms = planner::GemmMs(calibration_, m, n, k);
  if (!ms.ok()) return ms;
  return *ms * gemm_scale_;
}

absl::StatusOr<double> CostModel::TransferMs(Collective collective, Transport transport,
                                             int64_t bytes, int ranks, int nodes) const {
  if (nodes > 1) return InterNodeMs(collective, bytes, ranks);
  absl::StatusOr<double> measured =
      planner::TransferMs(calibration_, collective, transport, bytes, ranks);
  if (!measured.ok() || !what_if_.link_gbps || ranks < 2) return measured;
  // Another link: the measured latency (the smallest size's time) plus the
  // bytes at the asked bus bandwidth.
  const TransferCurve* curve = calibration_.Curve(collective, transport);
  return curve->points.front().ms +
         BandwidthMs(BusBwFactor(collective, ranks) * double(bytes), *what_if_.link_gbps);
}

absl::StatusOr<double> CostModel::StreamMs(Collective collective, Transport transport,
                                           int64_t bytes, int ranks, int nodes) const {
  if (nodes > 1) return InterNodeMs(collective, bytes, ranks);
  const TransferCurve* curve = calibration_.Curve(collective, transport);
  if (curve == nullptr || curve->points.empty()) {
    return planner::TransferMs(calibration_, collective, transport, bytes, ranks);  // NOT_FOUND
  }
  if (ranks < 2 || bytes <= 0) return 0.0;
  double busbw = what_if_.link_gbps.value_or(0);
  if (busbw == 0) {
    for (const TransferPoint& p : curve->points) {
      busbw = std::max(busbw, BusBwGBps(collective, double(p.bytes), p.ms, curve->ranks));
    }
  }
  return BandwidthMs(BusBwFactor(collective, ranks) * double(bytes), busbw);
}

absl::StatusOr<double> CostModel::InterNodeMs(Collective collective, int64_t bytes,
                                              int ranks) const {
  if (ranks < 2) return 0.0;
  double gbps = 0, latency_ms = 0;
  if (what_if_.inter_node_gbps) {
    gbps = *what_if_.inter_node_gbps;
    if (calibration_.inter_node) latency_ms = calibration_.inter_node->latency_ms;
  } else if (calibration_.inter_node) {
    gbps = calibration_.inter_node->gbps;
    latency_ms = calibration_.inter_node->latency_ms;
  } else {
    return absl::NotFoundError(
        "no link between nodes was measured (run `overlapctl commbench --peers` and "
        "`overlapctl calibrate --from` its JSON) and none was given (plan --node-count N "
        "--link-gbps X)");
  }
  return latency_ms + BandwidthMs(BusBwFactor(collective, ranks) * double(bytes), gbps);
}

double CostModel::Slowdown(Transport transport) const {
  auto it = calibration_.gemm_slowdown.find(transport);
  return it == calibration_.gemm_slowdown.end() ? 1.0 : it->second;
}

std::vector<std::string> CostModel::Assumptions() const {
  std::vector<std::string> out;
  const CalibrationIdentity& id = calibration_.identity;
  out.push_back(absl::StrCat("calibrated on ", id.device.empty() ? "an unnamed device" : id.device,
                             " (", id.backend, ", driver ", id.driver, ", CUDA ", id.cuda,
                             ", NCCL ", id.nccl, "), ", id.dtype));
  int measured_ranks = 0;
  for (const TransferCurve& c : calibration_.transfers)
    measured_ranks = std::max(measured_ranks, c.ranks);
  if (const std::string gap = TransferGap(calibration_); !gap.empty()) {
    out.push_back(
        absl::StrCat("only tp 1 is predicted (the GEMMs alone): the calibration has ", gap));
  } else if (what_if_.tp && *what_if_.tp != measured_ranks) {
    out.push_back(absl::StrFormat(
        "tp %d: transfers were measured at %d ranks; their bus bandwidth at each size is assumed "
        "unchanged at %d (every pair of GPUs has its own links, as through NVSwitch); "
        "unverified",
        *what_if_.tp, measured_ranks, *what_if_.tp));
  }
  if (what_if_.link_gbps) {
    out.push_back(absl::StrFormat(
        "within a node: every transport at %.0f GB/s bus bandwidth plus the latency measured at "
        "the smallest size",
        *what_if_.link_gbps));
  }
  if (what_if_.gemm_tflops) {
    out.push_back(absl::StrFormat(
        "GEMM: every GEMM time scaled by %.3f (%.0f TFLOP/s asked against the %.0f TFLOP/s "
        "the calibration's fastest GEMM ran at); efficiency against shape as calibrated",
        gemm_scale_, *what_if_.gemm_tflops, calibrated_tflops_));
  }
  for (Transport t : {Transport::kNccl, Transport::kP2p}) {
    if (calibration_.gemm_slowdown.count(t) == 0 && calibration_.Curve(Collective::kAllGather, t)) {
      out.push_back(absl::StrCat("no GEMM slowdown beside ", TransportName(t),
                                 " was measured: none assumed"));
    }
  }
  if (what_if_.nodes || what_if_.inter_node_gbps) {
    const double gbps = what_if_.inter_node_gbps.value_or(
        calibration_.inter_node ? calibration_.inter_node->gbps : 0);
    if (gbps <= 0) {
      out.push_back(
          "between nodes: no link measured or given, so nothing across nodes is "
          "predicted (plan --node-count N --link-gbps X)");
      return out;
    }
    out.push_back(absl::StrFormat(
        "between nodes: %.0f GB/s bus bandwidth for the data-parallel all-reduce (%s)", gbps,
        what_if_.inter_node_gbps ? "asked" : "measured by commbench --peers"));
  }
  return out;
}

}  // namespace overlap::planner
