// A node's calibration: what the planner (common/planner/planner.h) predicts
// from. Measured once per node by `overlapctl calibrate` (or fitted from
// recorded `bench`, `commbench` and GEMM results) and kept beside the tuning
// cache, keyed like it: GPU model, driver, CUDA and NCCL versions, and the
// ranks its transfers were measured at.
//
// It holds four things, each a measurement, never a datasheet figure:
// - GEMM time at measured (m, n, k) shapes; other shapes are interpolated in m
//   and scaled by FLOPs from the nearest measured (n, k);
// - transfer time against message size per collective and transport;
// - how much slower a GEMM runs beside each transport's transfers;
// - the fixed cost of one piece (a GEMM cut in pieces or a transfer in pieces
//   pays it once per piece: kernel boundaries, cross-device hand-offs).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/graph.h"
#include "common/stats.h"
#include "nlohmann/json.hpp"

namespace overlap::planner {

std::string CollectiveName(Collective collective);  // "all_gather" ...
absl::StatusOr<Collective> ParseCollective(const std::string& name);

struct GemmPoint {
  int64_t m = 0, n = 0, k = 0;  // the GEMM one rank runs: [m, k] x [k, n]
  double ms = 0;
};

struct TransferPoint {
  int64_t bytes = 0;  // the collective's whole buffer, as commbench counts it
  double ms = 0;
};

// One collective over one transport, measured at `ranks` ranks.
struct TransferCurve {
  Collective collective = Collective::kAllGather;
  Transport transport = Transport::kNccl;
  int ranks = 0;
  std::vector<TransferPoint> points;  // by bytes, ascending
};

// The network between daemons, as `commbench --peers` measured it.
struct InterNodeLink {
  double gbps = 0;        // bus bandwidth of a large all-reduce across nodes
  double latency_ms = 0;  // a small all-reduce across nodes
  int nodes = 0;          // how many nodes it was measured over
};

// What identifies the hardware and libraries a calibration was measured on.
struct CalibrationIdentity {
  std::string device;   // GPU model, e.g. "NVIDIA H200"
  std::string backend;  // cuda | host
  std::string driver;
  std::string cuda;
  std::string nccl;
  std::string dtype = "bf16";  // what the GEMMs and transfers were measured in
};

struct Calibration {
  static constexpr int kVersion = 1;
  CalibrationIdentity identity;
  std::vector<GemmPoint> gemms;
  std::vector<TransferCurve> transfers;
  // GEMM time beside the transport's transfers / GEMM time alone.
  std::map<Transport, double> gemm_slowdown;
  double piece_overhead_ms = 0;
  std::optional<InterNodeLink> inter_node;
  // Where each figure came from (a command, a file, a date), for the reader.
  std::vector<std::string> sources;

  const TransferCurve* Curve(Collective collective, Transport transport) const;
};

// Why `calibration` cannot predict a transfer (and so no op at tp > 1): it
// holds no transfer curve, as one measured on one device does (one rank moves
// nothing, so there is no curve to measure). Empty when it holds one.
std::string TransferGap(const Calibration& calibration);

// JSON as `overlapctl calibrate --json` writes it and the daemon stores it.
std::string CalibrationToJson(const Calibration& calibration);

// An integer field of a JSON document we read (a calibration, a bench or
// commbench result): a JSON integer, else json's type_error; a float such as
// 4e97 would overflow a conversion to int64.
int64_t JsonInteger(const nlohmann::json& value);
// INVALID_ARGUMENT naming the field when the text is not a calibration.
absl::StatusOr<Calibration> CalibrationFromJson(const std::string& text);

// OK when `calibration` may predict for `node`; otherwise FAILED_PRECONDITION
// naming what differs (another GPU, driver, CUDA or NCCL is refused, never
// silently used). Empty fields of `node` are not compared.
absl::Status CheckCalibrationMatches(const Calibration& calibration,
                                     const CalibrationIdentity& node);

// Time of one GEMM of (m, n, k): interpolated in m between measured points of
// the nearest measured (n, k) (in log distance), proportional to m beyond
// them, and scaled by n * k where (n, k) was not measured. NOT_FOUND without
// GEMM points.
absl::StatusOr<double> GemmMs(const Calibration& calibration, int64_t m, int64_t n, int64_t k);

// Time of `collective` over `transport` moving a buffer of `bytes` among
// `ranks` ranks: interpolated in log-log between measured sizes (scaled
// linearly in bytes beyond them). At another rank count than measured, the
// bus bandwidth at that size is assumed unchanged (nccl-tests' busbw: the
// time scales with (N-1)/N, 2(N-1)/N for all_reduce). One rank (or no bytes)
// moves nothing: 0, with or without a curve. NOT_FOUND when that collective
// was not measured over that transport (TransferGap's words when none was).
absl::StatusOr<double> TransferMs(const Calibration& calibration, Collective collective,
                                  Transport transport, int64_t bytes, int ranks);

}  // namespace overlap::planner
