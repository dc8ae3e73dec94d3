#include "client/plan/calibrate.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/core/command_io.h"
#include "client/jobs/progress_printer.h"
#include "client/measure/commbench.h"
#include "client/measure/grad_bench.h"
#include "client/plan/stored_calibration.h"
#include "common/planner/calibration_fit.h"
#include "common/status_macros.h"

namespace overlap::client {

using nlohmann::json;

namespace {

absl::StatusOr<planner::FitOptions> FitOptionsOf(const CalibrateOptions& options) {
  planner::FitOptions fit;
  for (absl::string_view pair : absl::StrSplit(options.gemm_slowdown, ',', absl::SkipEmpty())) {
    std::vector<std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
    double factor = 0;
    absl::StatusOr<Transport> t =
        kv.size() == 2 ? ParseTransport(kv[0]) : absl::InvalidArgumentError("no '='");
    if (!t.ok() || !absl::SimpleAtod(kv[1], &factor) || factor < 1 || factor > 10) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--gemm-slowdown '", pair, "': expected TRANSPORT=FACTOR, e.g. nccl=1.2 (1 to 10)"));
    }
    fit.gemm_slowdown[*t] = factor;
  }
  if (!fit.gemm_slowdown.empty()) {
    fit.notes.push_back(absl::StrCat("GEMM slowdown given: ", options.gemm_slowdown));
  }
  if (options.piece_overhead_ms >= 0) {
    fit.piece_overhead_ms = options.piece_overhead_ms;
    fit.notes.push_back(
        absl::StrFormat("per-piece cost given: %.4f ms", options.piece_overhead_ms));
  }
  return fit;
}

absl::StatusOr<json> ReadJson(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadBoundedFile(path, kMaxInputFileBytes));
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not JSON"));
  return doc;
}

std::string Summary(const planner::Calibration& c) {
  std::string out = absl::StrCat("calibration of ", c.identity.device, " (", c.identity.backend,
                                 "): ", c.gemms.size(), " GEMM shape(s)");
  for (const planner::TransferCurve& t : c.transfers) {
    absl::StrAppend(&out, "; ", planner::CollectiveName(t.collective), " ",
                    TransportName(t.transport), " ", t.points.size(), " size(s) at ", t.ranks,
                    " ranks");
  }
  for (const auto& [t, f] : c.gemm_slowdown) {
    absl::StrAppend(&out, absl::StrFormat("; GEMM %.3fx beside %s", f, TransportName(t)));
  }
  if (const std::string gap = planner::TransferGap(c); !gap.empty()) {
    absl::StrAppend(&out, "; ", gap);
  }
  absl::StrAppend(&out, absl::StrFormat("; %.4f ms per piece", c.piece_overhead_ms));
  if (c.inter_node) {
    absl::StrAppend(&out, absl::StrFormat("; %.1f GB/s between %d nodes", c.inter_node->gbps,
                                          c.inter_node->nodes));
  }
  return out + "\n";
}

// How many ranks calibrate measures over: the devices asked for, else the daemon's.
absl::StatusOr<int> RanksToMeasure(DaemonClient& client, const CalibrateOptions& options) {
  if (!options.devices.empty()) return static_cast<int>(options.devices.size());
  absl::StatusOr<v1::GetNodeInfoResponse> node = client.GetNodeInfo();
  if (!node.ok()) return node.status();
  return node->devices_size();
}

// Runs commbench and a one-repeat bench sweep, each writing its JSON to a
// private temporary file; returns their paths (commbench's first). On one
// rank commbench is left out: nothing crosses a link, so there is no transfer
// curve to measure, and the GEMMs alone are what the calibration keeps.
absl::StatusOr<std::vector<std::string>> Measure(DaemonClient& client,
                                                 const CalibrateOptions& options, bool err_is_tty,
                                                 std::ostream& err) {
  absl::StatusOr<int> ranks = RanksToMeasure(client, options);
  if (!ranks.ok()) {
    return absl::Status(ranks.status().code(),
                        absl::StrCat("cannot ask ", client.address(),
                                     " for its devices: ", ranks.status().message()));
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/overlapctl-calibrate-XXXXXX");
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot make a temporary directory under ", dir));
  }
  const std::string comm_file = dir + "/commbench.json", bench_file = dir + "/bench.json";
  std::vector<std::string> files;
  if (*ranks < 2) {
    ProgressStream(err) << "calibrate: step 1 of 2 skipped: one rank, so no transfer curve (tp > 1 "
                           "needs one: calibrate on 2+ devices); the GEMMs alone are measured\n";
  } else {
    CommBenchOptions comm;
    comm.devices = options.devices;
    ProgressStream(err) << "calibrate: step 1 of 2: the collectives alone (commbench)\n";
    int rc = RunCommBench(client, comm, comm_file, false, err_is_tty, err, err);
    if (rc != kExitOk) return absl::AbortedError("commbench did not finish (see above)");
    files.push_back(comm_file);
  }
  BenchOptions bench;
  bench.devices = options.devices;
  bench.repeats = 1;
  if (!options.shapes.empty()) {
    absl::StatusOr<std::vector<BenchShape>> shapes = ParseBenchShapes(options.shapes);
    if (!shapes.ok()) return shapes.status();
    bench.shapes = *shapes;
  }
  ProgressStream(err)
      << "calibrate: step 2 of 2: GEMM alone and beside each transport (bench, 1 repeat)\n";
  const int rc = RunBench(client, bench, bench_file, false, err_is_tty, err, err);
  if (rc != kExitOk) return absl::AbortedError("bench did not finish (see above)");
  files.push_back(bench_file);
  return files;
}

}  // namespace

int RunCalibrate(DaemonClient& client, const CalibrateOptions& options, bool json_out,
                 bool err_is_tty, std::ostream& out, std::ostream& err) {
  absl::StatusOr<planner::FitOptions> fit = FitOptionsOf(options);
  if (!fit.ok()) return UsageError(fit.status(), err);
  if (!options.load.empty()) {
    if (!options.from.empty()) {
      err << "overlapctl: calibrate: --load keeps a calibration as it is; --from fits one\n";
      return kExitUsage;
    }
    absl::StatusOr<planner::Calibration> loaded = LoadCalibration(client, options.load, 0, err);
    if (!loaded.ok()) return ExitForCalibrationError(loaded.status(), client, err);
    absl::StatusOr<v1::PutCalibrationResponse> stored = client.PutCalibration(
        planner::CalibrationToJson(*loaded), static_cast<int>(options.devices.size()));
    if (!stored.ok()) return ReportCallError(stored.status(), client.address(), err);
    err << "calibrate: kept by the daemon (plan and auto use it)\n";
    out << (json_out ? planner::CalibrationToJson(*loaded) + "\n" : Summary(*loaded));
    return kExitOk;
  }
  std::vector<std::string> files = options.from;
  const bool measured = files.empty();
  if (measured) {
    absl::StatusOr<std::vector<std::string>> made = Measure(client, options, err_is_tty, err);
    if (!made.ok()) {
      err << "overlapctl: calibrate: " << made.status().message() << "\n";
      return made.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage
                                                                        : kExitJobFailed;
    }
    files = *made;
  }
  std::vector<json> docs;
  for (const std::string& f : files) {
    absl::StatusOr<json> doc = ReadJson(f);
    if (!doc.ok()) return UsageError(doc.status(), err);
    docs.push_back(std::move(*doc));
  }
  std::vector<std::string> names = files;
  if (measured) {
    const std::string when = absl::FormatTime("%Y-%m-%d", absl::Now(), absl::UTCTimeZone());
    names.clear();
    if (files.size() > 1)
      names.push_back(absl::StrCat("commbench measured by calibrate on ", when));
    names.push_back(absl::StrCat("bench measured by calibrate on ", when));
  }
  absl::StatusOr<planner::Calibration> calibration = planner::FitCalibration(docs, names, *fit);
  if (measured) {
    for (const std::string& f : files) std::remove(f.c_str());
    rmdir(files[0].substr(0, files[0].rfind('/')).c_str());
  }
  if (!calibration.ok()) {
    err << "overlapctl: calibrate: " << calibration.status().message() << "\n";
    return kExitUsage;
  }
  const std::string text = planner::CalibrationToJson(*calibration);
  if (!options.output.empty()) {
    if (int rc = WriteTextFile(options.output, text + "\n", err); rc != kExitOk) return rc;
  }
  if (measured || options.store) {
    absl::StatusOr<v1::PutCalibrationResponse> stored =
        client.PutCalibration(text, static_cast<int>(options.devices.size()));
    if (!stored.ok()) return ReportCallError(stored.status(), client.address(), err);
    err << "calibrate: kept by the daemon (plan and auto use it)\n";
  }
  if (json_out) {
    out << text << "\n";
  } else {
    out << Summary(*calibration);
  }
  return kExitOk;
}

}  // namespace overlap::client
