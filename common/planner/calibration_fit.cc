#include "common/planner/calibration_fit.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/dtype.h"
#include "common/graph.h"
#include "common/planner/op_model.h"
#include "common/schedule.h"
#include "common/stats.h"

namespace overlap::planner {

using nlohmann::json;

namespace {

bool HasRowsWith(const json& doc, const char* field) {
  if (!doc.is_object() || !doc.contains("rows") || !doc["rows"].is_array()) return false;
  return !doc["rows"].empty() && doc["rows"][0].is_object() && doc["rows"][0].contains(field);
}

CalibrationIdentity IdentityOf(const json& doc) {
  CalibrationIdentity id;
  if (doc.contains("gpus") && doc["gpus"].is_array() && !doc["gpus"].empty()) {
    id.device = doc["gpus"][0].get<std::string>();
  }
  id.backend = doc.value("backend", "");
  id.driver = doc.value("cuda_driver", "");
  id.cuda = doc.value("cuda_runtime", "");
  id.nccl = doc.value("nccl", "");
  id.dtype = doc.value("dtype", "bf16");
  return id;
}

// Empty fields of either side match anything.
absl::Status SameIdentity(const CalibrationIdentity& a, const CalibrationIdentity& b,
                          const std::string& name) {
  Calibration first;
  first.identity = a;
  absl::Status s = CheckCalibrationMatches(first, b);
  if (s.ok() && a.dtype != b.dtype) {
    s = absl::FailedPreconditionError(
        absl::StrCat("measured in ", b.dtype, " where the first was ", a.dtype));
  }
  if (s.ok()) return s;
  return absl::FailedPreconditionError(absl::StrCat(name, ": ", s.message()));
}

void AddPoint(
    std::map<std::pair<Collective, Transport>, std::map<int64_t, std::vector<double>>>& by,
    int& ranks, Collective c, Transport t, int64_t bytes, double ms, int tp) {
  if (!(ms > 0) || !std::isfinite(ms) || bytes <= 0) return;
  by[{c, t}][bytes].push_back(ms);
  ranks = std::max(ranks, tp);
}

absl::StatusOr<Transport> TransportOfMode(const std::string& mode) {
  // "ring/2/p2p+graph" -> p2p
  std::string plain = mode.substr(0, mode.find('+'));
  for (absl::string_view part : absl::StrSplit(plain, '/')) {
    if (part == "nccl") return Transport::kNccl;
    if (part == "p2p") return Transport::kP2p;
    if (part == "direct") return Transport::kDirect;
  }
  return absl::NotFoundError("no transport");
}

// What autotune measured of one bench row's candidates.
struct CandidateRow {
  OpShape shape;
  std::vector<std::pair<ops::Schedule, double>> measured;  // stage-one best medians
};

// The per-piece cost, 0 to 20 us in 0.5 us steps, whose predictions of the
// rows' leading candidates (within kLeaders of each row's best: those `auto`
// chooses among) err least (median |log(predicted / measured)|). The slow
// many-piece candidates are left out: what makes them slow (a collective's
// latency per piece, partial waves of tiles) is not a per-piece constant, and
// fitting them would bend the prediction of the schedules that win.
constexpr double kLeaders = 0.10;
std::optional<double> FitPieceOverhead(Calibration calibration,
                                       const std::vector<CandidateRow>& rows) {
  std::optional<double> best;
  double best_error = 0;
  for (int step = 0; step <= 40; ++step) {
    calibration.piece_overhead_ms = step * 0.0005;
    const CostModel model(calibration, {});
    std::vector<double> errors;
    for (const CandidateRow& row : rows) {
      double fastest = row.measured[0].second;
      for (const auto& entry : row.measured) fastest = std::min(fastest, entry.second);
      for (const auto& [schedule, ms] : row.measured) {
        if (ms > fastest * (1 + kLeaders)) continue;
        absl::StatusOr<SchedulePrediction> p = PredictSchedule(model, row.shape, schedule);
        if (p.ok() && p->step_ms > 0 && ms > 0)
          errors.push_back(std::fabs(std::log(p->step_ms / ms)));
      }
    }
    if (errors.empty()) return std::nullopt;
    const double error = Summarize(errors).median;
    if (!best || error < best_error) {
      best = calibration.piece_overhead_ms;
      best_error = error;
    }
  }
  return best;
}

}  // namespace

std::string ResultKind(const json& doc) {
  if (HasRowsWith(doc, "transports")) {
    const json& t = doc["rows"][0]["transports"];
    return t.contains("dp") ? "commbench_nodes" : "commbench";
  }
  if (HasRowsWith(doc, "gemm_alone_ms")) return "bench";
  return "";
}

absl::StatusOr<Calibration> FitCalibration(const std::vector<json>& docs,
                                           const std::vector<std::string>& names,
                                           const FitOptions& options) {
  if (docs.empty()) return absl::InvalidArgumentError("nothing to calibrate from");
  Calibration out;
  std::map<std::pair<Collective, Transport>, std::map<int64_t, std::vector<double>>> transfers;
  int transfer_ranks = 0;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<double>> gemms;
  std::map<Transport, std::vector<double>> slowdowns;
  std::vector<CandidateRow> candidate_rows;
  bool identity_set = false;
  for (size_t d = 0; d < docs.size(); ++d) {
    const json& doc = docs[d];
    const std::string name = d < names.size() ? names[d] : absl::StrCat("document ", d + 1);
    const std::string kind = ResultKind(doc);
    if (kind.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": not a result of bench, commbench or commbench --peers (--json)"));
    }
    const CalibrationIdentity id = IdentityOf(doc);
    if (!identity_set) {
      out.identity = id;
      identity_set = true;
    } else if (absl::Status s = SameIdentity(out.identity, id, name); !s.ok()) {
      return s;
    }
    try {
      if (kind == "commbench_nodes") {
        const json& rows = doc["rows"];
        InterNodeLink link;
        link.nodes = doc.contains("nodes") ? int(doc["nodes"].size()) : 0;
        link.latency_ms = rows.front()["transports"]["dp"].value("ms", 0.0);
        for (const json& r : rows) {
          link.gbps = std::max(link.gbps, r["transports"]["dp"].value("busbw_gbps", 0.0));
        }
        if (!(link.gbps > 0)) {
          return absl::InvalidArgumentError(absl::StrCat(name, ": no dp bus bandwidth"));
        }
        out.inter_node = link;
      } else if (kind == "commbench") {
        const int tp = doc.value("tp", 0);
        // One rank's "collective" is a local copy: it is no transfer curve
        // (and a curve needs 2+ ranks), so the document adds nothing to keep.
        if (tp < 2) {
          out.sources.push_back(
              absl::StrCat(kind, ": ", name, ": left out: one rank, nothing crosses a link"));
          continue;
        }
        for (const json& r : doc["rows"]) {
          auto c = ParseCollective(r.at("collective").get<std::string>());
          if (!c.ok()) continue;
          for (const auto& [variant, figures] : r.at("transports").items()) {
            const Transport t = variant == "nccl"  ? Transport::kNccl
                                : variant == "p2p" ? Transport::kP2p
                                                   : Transport::kNone;
            if (t == Transport::kNone || !figures.value("verified", true)) continue;
            AddPoint(transfers, transfer_ranks, *c, t, JsonInteger(r.at("bytes")),
                     figures.value("ms", 0.0), tp);
          }
        }
      } else {  // bench
        auto dtype = ParseDType(doc.value("dtype", "bf16"));
        if (!dtype.ok()) return dtype.status();
        for (const json& r : doc["rows"]) {
          auto type = ParseOpType(r.at("op").get<std::string>());
          if (!type.ok()) continue;
          const int tp = r.value("tp", 1);
          OpSpec op;
          op.type = *type;
          op.m = JsonInteger(r.at("m"));
          op.n = JsonInteger(r.at("n"));
          op.k = JsonInteger(r.at("k"));
          const LocalShapes local = LocalShapesFor(op, tp);
          const double gemm_ms = r.value("gemm_alone_ms", 0.0);
          if (gemm_ms > 0 && std::isfinite(gemm_ms)) {
            gemms[{local.gemm_m, local.gemm_n, local.gemm_k}].push_back(r["gemm_alone_ms"]);
          }
          if (tp < 2) continue;
          CandidateRow candidates;
          candidates.shape.type = op.type;
          candidates.shape.m = op.m;
          candidates.shape.n = op.n;
          candidates.shape.k = op.k;
          candidates.shape.tp = tp;
          candidates.shape.dtype = *dtype;
          for (const json& c : r.value("candidates", json::array())) {
            auto s = ops::ParseScheduleName(c.value("schedule", ""));
            const double ms = c.value("best_ms", 0.0);
            if (s.ok() && ms > 0 && std::isfinite(ms)) candidates.measured.push_back({*s, ms});
          }
          if (!candidates.measured.empty()) candidate_rows.push_back(std::move(candidates));
          const Collective c = op.type == OpType::kAgGemm   ? Collective::kAllGather
                               : op.type == OpType::kGemmRs ? Collective::kReduceScatter
                                                            : Collective::kAllReduce;
          const int64_t bytes = c == Collective::kAllGather
                                    ? op.m * op.k * int64_t(DTypeSize(*dtype))
                                    : op.m * op.n * int64_t(DTypeSize(GemmOutputDType(*dtype)));
          AddPoint(transfers, transfer_ranks, c, Transport::kNccl, bytes,
                   r.value("comm_alone_nccl_ms", 0.0), tp);
          AddPoint(transfers, transfer_ranks, c, Transport::kP2p, bytes,
                   r.value("comm_alone_p2p_ms", 0.0), tp);
          auto t = TransportOfMode(r.value("auto_mode", ""));
          const double slowdown = r.value("gemm_slowdown", 0.0);
          if (t.ok() && slowdown >= 1 && std::isfinite(slowdown) &&
              r.value("auto_mode", "").rfind("serial", 0) != 0) {
            slowdowns[*t].push_back(slowdown);
          }
        }
      }
    } catch (const json::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", e.what()));
    }
    out.sources.push_back(
        absl::StrCat(kind, ": ", name,
                     doc.contains("git_commit")
                         ? absl::StrCat(" (overlapd ", doc["git_commit"].get<std::string>(), ")")
                         : ""));
  }
  for (const auto& [key, by_bytes] : transfers) {
    TransferCurve curve{key.first, key.second, transfer_ranks, {}};
    for (const auto& [bytes, ms] : by_bytes) curve.points.push_back({bytes, Summarize(ms).median});
    out.transfers.push_back(std::move(curve));
  }
  for (const auto& [shape, ms] : gemms) {
    out.gemms.push_back(
        {std::get<0>(shape), std::get<1>(shape), std::get<2>(shape), Summarize(ms).median});
  }
  for (const auto& [t, factors] : slowdowns) out.gemm_slowdown[t] = Summarize(factors).median;
  for (const auto& [t, factor] : options.gemm_slowdown) out.gemm_slowdown[t] = factor;
  if (options.piece_overhead_ms) {
    out.piece_overhead_ms = *options.piece_overhead_ms;
  } else if (auto fitted = FitPieceOverhead(out, candidate_rows)) {
    out.piece_overhead_ms = *fitted;
    out.sources.push_back(
        absl::StrFormat("per-piece cost %.4f ms: fitted to %d bench row(s)' candidate timings",
                        *fitted, static_cast<int>(candidate_rows.size())));
  }
  for (const std::string& note : options.notes) out.sources.push_back(note);
  return out;
}

}  // namespace overlap::planner
