#include "common/planner/calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/enum_names.h"
#include "nlohmann/json.hpp"

namespace overlap::planner {

using nlohmann::json;

namespace {

constexpr EnumName<Collective> kCollectiveNames[] = {{Collective::kAllGather, "all_gather"},
                                                     {Collective::kReduceScatter, "reduce_scatter"},
                                                     {Collective::kAllReduce, "all_reduce"}};

}  // namespace

std::string CollectiveName(Collective collective) { return NameOf(kCollectiveNames, collective); }

absl::StatusOr<Collective> ParseCollective(const std::string& name) {
  for (const EnumName<Collective>& row : kCollectiveNames) {
    if (row.name == name) return row.value;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown collective '", name, "' (all_gather, reduce_scatter, all_reduce)"));
}

const TransferCurve* Calibration::Curve(Collective collective, Transport transport) const {
  for (const TransferCurve& curve : transfers) {
    if (curve.collective == collective && curve.transport == transport) return &curve;
  }
  return nullptr;
}

std::string TransferGap(const Calibration& calibration) {
  if (!calibration.transfers.empty()) return "";
  return "no transfer curve (one rank moves nothing, so a calibration measured on one device has "
         "none); tp > 1 needs a transfer curve: calibrate on 2+ devices";
}

namespace {

absl::StatusOr<Transport> ParseCalibratedTransport(const std::string& name) {
  for (Transport t : {Transport::kNccl, Transport::kP2p, Transport::kDirect}) {
    if (TransportName(t) == name) return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown transport '", name, "' (nccl, p2p, direct)"));
}

json IdentityJson(const CalibrationIdentity& id) {
  return json{{"device", id.device}, {"backend", id.backend}, {"driver", id.driver},
              {"cuda", id.cuda},     {"nccl", id.nccl},       {"dtype", id.dtype}};
}

// Bounds on what a calibration may hold: beyond them a figure is damage, not
// a measurement, and sums of them could overflow.
constexpr int64_t kMaxDim = int64_t{1} << 31;
constexpr int64_t kMaxBytes = int64_t{1} << 46;
constexpr double kMaxMs = 1e7;
constexpr size_t kMaxPoints = 4096;

bool SaneMs(double ms) { return ms > 0 && ms <= kMaxMs; }

// Reads the whole document; nlohmann throws on a wrong type, which the caller
// turns into INVALID_ARGUMENT.
absl::StatusOr<Calibration> ParseDocument(const json& doc) {
  Calibration out;
  const int64_t version = JsonInteger(doc.at("version"));
  if (version != Calibration::kVersion) {
    return absl::InvalidArgumentError(absl::StrCat("calibration version ", version,
                                                   " is not read by this build (reads ",
                                                   Calibration::kVersion, ")"));
  }
  const json& id = doc.at("identity");
  out.identity.device = id.value("device", "");
  out.identity.backend = id.value("backend", "");
  out.identity.driver = id.value("driver", "");
  out.identity.cuda = id.value("cuda", "");
  out.identity.nccl = id.value("nccl", "");
  out.identity.dtype = id.value("dtype", "bf16");
  for (const json& g : doc.value("gemm", json::array())) {
    GemmPoint p{JsonInteger(g.at("m")), JsonInteger(g.at("n")), JsonInteger(g.at("k")),
                g.at("ms").get<double>()};
    if (p.m <= 0 || p.n <= 0 || p.k <= 0 || p.m > kMaxDim || p.n > kMaxDim || p.k > kMaxDim ||
        !SaneMs(p.ms)) {
      return absl::InvalidArgumentError(
          absl::StrCat("calibration gemm point ", g.dump().substr(0, 200),
                       ": m, n, k must be in 1..2^31 and ms in (0, 1e7]"));
    }
    if (out.gemms.size() >= kMaxPoints) {
      return absl::InvalidArgumentError("calibration: more than 4096 GEMM points");
    }
    out.gemms.push_back(p);
  }
  for (const json& t : doc.value("transfers", json::array())) {
    TransferCurve curve;
    auto collective = ParseCollective(t.at("collective").get<std::string>());
    if (!collective.ok()) return collective.status();
    auto transport = ParseCalibratedTransport(t.at("transport").get<std::string>());
    if (!transport.ok()) return transport.status();
    curve.collective = *collective;
    curve.transport = *transport;
    const int64_t ranks = JsonInteger(t.at("ranks"));
    if (ranks < 2 || ranks > 65536) {
      return absl::InvalidArgumentError("calibration transfer curve: ranks must be 2 to 65536");
    }
    curve.ranks = static_cast<int>(ranks);
    for (const json& p : t.at("points")) {
      TransferPoint point{JsonInteger(p.at(0)), p.at(1).get<double>()};
      if (point.bytes <= 0 || point.bytes > kMaxBytes || !SaneMs(point.ms)) {
        return absl::InvalidArgumentError(
            absl::StrCat("calibration ", CollectiveName(curve.collective), " point ",
                         p.dump().substr(0, 200), ": bytes must be in 1..2^46 and ms in (0, 1e7]"));
      }
      if (curve.points.size() >= kMaxPoints) {
        return absl::InvalidArgumentError("calibration: more than 4096 points in a curve");
      }
      curve.points.push_back(point);
    }
    std::sort(curve.points.begin(), curve.points.end(),
              [](const TransferPoint& a, const TransferPoint& b) { return a.bytes < b.bytes; });
    out.transfers.push_back(std::move(curve));
  }
  const json slowdowns = doc.value("gemm_slowdown", json::object());
  for (const auto& [name, factor] : slowdowns.items()) {
    auto transport = ParseCalibratedTransport(name);
    if (!transport.ok()) return transport.status();
    const double f = factor.get<double>();
    if (!(f >= 1.0) || f > 10) {
      return absl::InvalidArgumentError(
          absl::StrCat("calibration gemm_slowdown.", name, " = ", f, ": must be between 1 and 10"));
    }
    out.gemm_slowdown[*transport] = f;
  }
  out.piece_overhead_ms = doc.value("piece_overhead_ms", 0.0);
  if (!(out.piece_overhead_ms >= 0 && out.piece_overhead_ms <= 1000)) {
    return absl::InvalidArgumentError("calibration piece_overhead_ms must be in 0..1000");
  }
  if (doc.contains("inter_node")) {
    const json& link = doc.at("inter_node");
    const int64_t nodes = link.contains("nodes") ? JsonInteger(link.at("nodes")) : 0;
    if (nodes < 0 || nodes > 1000000) {
      return absl::InvalidArgumentError("calibration inter_node.nodes must be 0 to 1000000");
    }
    out.inter_node = InterNodeLink{link.at("gbps").get<double>(), link.value("latency_ms", 0.0),
                                   static_cast<int>(nodes)};
    if (!(out.inter_node->gbps > 0 && out.inter_node->gbps <= 1e6) ||
        !(out.inter_node->latency_ms >= 0 && out.inter_node->latency_ms <= kMaxMs)) {
      return absl::InvalidArgumentError(
          "calibration inter_node: gbps must be in (0, 1e6] and latency_ms in 0..1e7");
    }
  }
  for (const json& s : doc.value("sources", json::array()))
    out.sources.push_back(s.get<std::string>());
  return out;
}

}  // namespace

int64_t JsonInteger(const json& value) {
  if (!value.is_number_integer()) {
    throw json::type_error::create(302, "an integer is expected", &value);
  }
  return value.get<int64_t>();
}

std::string CalibrationToJson(const Calibration& calibration) {
  json doc;
  doc["version"] = Calibration::kVersion;
  doc["identity"] = IdentityJson(calibration.identity);
  json gemms = json::array();
  for (const GemmPoint& g : calibration.gemms) {
    gemms.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"ms", g.ms}});
  }
  doc["gemm"] = gemms;
  json transfers = json::array();
  for (const TransferCurve& curve : calibration.transfers) {
    json points = json::array();
    for (const TransferPoint& p : curve.points) points.push_back({p.bytes, p.ms});
    transfers.push_back({{"collective", CollectiveName(curve.collective)},
                         {"transport", TransportName(curve.transport)},
                         {"ranks", curve.ranks},
                         {"points", points}});
  }
  doc["transfers"] = transfers;
  json slowdown = json::object();
  for (const auto& [transport, factor] : calibration.gemm_slowdown) {
    slowdown[TransportName(transport)] = factor;
  }
  doc["gemm_slowdown"] = slowdown;
  doc["piece_overhead_ms"] = calibration.piece_overhead_ms;
  if (calibration.inter_node) {
    doc["inter_node"] = {{"gbps", calibration.inter_node->gbps},
                         {"latency_ms", calibration.inter_node->latency_ms},
                         {"nodes", calibration.inter_node->nodes}};
  }
  doc["sources"] = calibration.sources;
  return doc.dump(1);
}

absl::StatusOr<Calibration> CalibrationFromJson(const std::string& text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError("calibration is not a JSON object");
  }
  try {
    return ParseDocument(doc);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("calibration: ", e.what()));
  }
}

absl::Status CheckCalibrationMatches(const Calibration& calibration,
                                     const CalibrationIdentity& node) {
  const CalibrationIdentity& have = calibration.identity;
  const std::pair<const char*, std::pair<std::string, std::string>> fields[] = {
      {"GPU", {have.device, node.device}},    {"backend", {have.backend, node.backend}},
      {"driver", {have.driver, node.driver}}, {"CUDA", {have.cuda, node.cuda}},
      {"NCCL", {have.nccl, node.nccl}},
  };
  for (const auto& [what, values] : fields) {
    if (values.second.empty() || values.first == values.second) continue;
    return absl::FailedPreconditionError(
        absl::StrCat("the calibration was measured with ", what, " '", values.first,
                     "' and this node has '", values.second, "': run `overlapctl calibrate` here"));
  }
  return absl::OkStatus();
}

namespace {

// Linear interpolation of y at x between (x0, y0) and (x1, y1).
double Lerp(double x, double x0, double y0, double x1, double y1) {
  if (x1 == x0) return y0;
  return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
}

}  // namespace

absl::StatusOr<double> GemmMs(const Calibration& calibration, int64_t m, int64_t n, int64_t k) {
  if (calibration.gemms.empty()) {
    return absl::NotFoundError("the calibration has no GEMM figures");
  }
  // The nearest measured (n, k), in log distance.
  double nearest = std::numeric_limits<double>::infinity();
  int64_t near_n = 0, near_k = 0;
  for (const GemmPoint& p : calibration.gemms) {
    const double d = std::fabs(std::log(double(n) / p.n)) + std::fabs(std::log(double(k) / p.k));
    if (d < nearest) {
      nearest = d;
      near_n = p.n;
      near_k = p.k;
    }
  }
  std::vector<GemmPoint> row;
  for (const GemmPoint& p : calibration.gemms) {
    if (p.n == near_n && p.k == near_k) row.push_back(p);
  }
  std::sort(row.begin(), row.end(),
            [](const GemmPoint& a, const GemmPoint& b) { return a.m < b.m; });
  double ms;
  if (m <= row.front().m) {
    ms = row.front().ms * double(m) / row.front().m;
  } else if (m >= row.back().m) {
    ms = row.back().ms * double(m) / row.back().m;
  } else {
    size_t i = 1;
    while (row[i].m < m) ++i;
    ms = Lerp(double(m), row[i - 1].m, row[i - 1].ms, row[i].m, row[i].ms);
  }
  return ms * (double(n) * double(k)) / (double(near_n) * double(near_k));
}

absl::StatusOr<double> TransferMs(const Calibration& calibration, Collective collective,
                                  Transport transport, int64_t bytes, int ranks) {
  // Over one rank a collective is an alias or a no-op (server/ops/): no curve needed.
  if (ranks < 2 || bytes <= 0) return 0.0;
  const TransferCurve* curve = calibration.Curve(collective, transport);
  if (curve == nullptr || curve->points.empty()) {
    if (const std::string gap = TransferGap(calibration); !gap.empty()) {
      return absl::NotFoundError(absl::StrCat("the calibration has ", gap));
    }
    return absl::NotFoundError(absl::StrCat("the calibration has no ", CollectiveName(collective),
                                            " over ", TransportName(transport)));
  }
  const std::vector<TransferPoint>& pts = curve->points;
  double ms;
  if (bytes <= pts.front().bytes) {
    // Below the smallest size a collective costs its latency: no faster.
    ms = pts.front().ms;
  } else if (bytes >= pts.back().bytes) {
    ms = pts.back().ms * double(bytes) / pts.back().bytes;
  } else {
    size_t i = 1;
    while (pts[i].bytes < bytes) ++i;
    ms = std::exp(Lerp(std::log(double(bytes)), std::log(double(pts[i - 1].bytes)),
                       std::log(pts[i - 1].ms), std::log(double(pts[i].bytes)),
                       std::log(pts[i].ms)));
  }
  return ms * BusBwFactor(collective, ranks) / BusBwFactor(collective, curve->ranks);
}

}  // namespace overlap::planner
