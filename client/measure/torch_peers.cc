#include "client/measure/torch_peers.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/format/table.h"
#include "client/jobs/progress_printer.h"

namespace overlap::client {

namespace {

std::string OnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/", name);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// OVERLAP_TORCH_PEERS, else the repository's copy from here or beside overlapctl.
std::string PeersScript() {
  if (const char* env = std::getenv("OVERLAP_TORCH_PEERS"); env != nullptr && *env) return env;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  for (const std::filesystem::path& p : {std::filesystem::path("bench/peers/torch_tp.py"),
                                         exe.parent_path() / "../../bench/peers/torch_tp.py"}) {
    if (std::filesystem::is_regular_file(p, ec)) return p.string();
  }
  return "";
}

// Runs argv, its output on stderr; its exit status (-1 when it could not start).
int Run(const std::vector<std::string>& argv) {
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    ::dup2(STDERR_FILENO, STDOUT_FILENO);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TorchPeersRun RunTorchPeers(const std::vector<BenchShape>& shapes, int tp, const std::string& dtype,
                            std::ostream& err) {
  TorchPeersRun run;
  const std::string torchrun = OnPath("torchrun");
  const std::string script = PeersScript();
  if (torchrun.empty()) {
    run.not_measured = "no torchrun on PATH (PyTorch is not installed here)";
    return run;
  }
  if (script.empty()) {
    run.not_measured = "bench/peers/torch_tp.py not found (set OVERLAP_TORCH_PEERS)";
    return run;
  }
  std::vector<std::string> names;
  for (const BenchShape& s : shapes) {
    names.push_back(absl::StrFormat("%s:%dx%dx%d", s.op, s.m, s.k, s.n));
  }
  char dir[] = "/tmp/overlapctl-torch-XXXXXX";
  if (::mkdtemp(dir) == nullptr) {
    run.not_measured = "cannot make a temporary directory";
    return run;
  }
  const std::string json = absl::StrCat(dir, "/torch.json");
  ProgressStream(err) << "bench: PyTorch peers on " << tp << " GPU(s) (" << script << ")\n";
  const int rc = Run({torchrun, absl::StrCat("--nproc_per_node=", tp), script, "--shapes",
                      absl::StrJoin(names, ","), "--dtype", dtype, "--json", json});
  std::ifstream in(json);
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
  std::filesystem::remove_all(dir);
  if (rc != 0 || doc.is_discarded() || !doc.contains("rows")) {
    run.not_measured = absl::StrCat("torchrun exited ", rc, " without results (see above)");
    return run;
  }
  std::map<std::tuple<std::string, int64_t, int64_t, int64_t>, TorchPeerFigures> by_shape;
  for (const nlohmann::json& r : doc["rows"]) {
    TorchPeerFigures f;
    if (r.contains("serial")) f.serial_ms = r["serial"].value("median_ms", 0.0);
    if (r.contains("async_tp") && r["async_tp"].is_object()) {
      f.async_tp_ms = r["async_tp"].value("median_ms", 0.0);
    }
    by_shape[{r.value("op", ""), r.value("m", int64_t{0}), r.value("k", int64_t{0}),
              r.value("n", int64_t{0})}] = f;
  }
  for (const BenchShape& s : shapes) run.figures.push_back(by_shape[{s.op, s.m, s.k, s.n}]);
  return run;
}

void AddTorchPeersJson(const TorchPeersRun& run, nlohmann::json& j) {
  if (run.figures.empty()) {
    j["torch_peers_not_measured"] = run.not_measured;
    return;
  }
  for (size_t i = 0; i < run.figures.size() && i < j["rows"].size(); ++i) {
    j["rows"][i]["torch_serial_ms"] = run.figures[i].serial_ms;
    j["rows"][i]["torch_async_tp_ms"] = run.figures[i].async_tp_ms;
  }
}

std::string FormatTorchPeers(const std::vector<BenchRow>& rows, const TorchPeersRun& run) {
  if (run.figures.empty())
    return absl::StrCat("PyTorch peers: not measured: ", run.not_measured, "\n");
  TextTable t(Columns({Words({"OP", "SHAPE"}), Figures({"OVERLAPD_MS", "TORCH_SERIAL_MS",
                                                        "TORCH_ASYNC_TP_MS", "VS_BEST_TORCH"})}));
  for (size_t i = 0; i < rows.size() && i < run.figures.size(); ++i) {
    const TorchPeerFigures& f = run.figures[i];
    double best = f.serial_ms;
    if (f.async_tp_ms > 0 && (best <= 0 || f.async_tp_ms < best)) best = f.async_tp_ms;
    t.AddRow(
        {rows[i].shape.op, FormatBenchShape(rows[i].shape),
         absl::StrFormat("%.3f", rows[i].step_ms),
         f.serial_ms > 0 ? absl::StrFormat("%.3f", f.serial_ms) : "-",
         f.async_tp_ms > 0 ? absl::StrFormat("%.3f", f.async_tp_ms) : "-",
         best > 0 && rows[i].step_ms > 0 ? absl::StrFormat("%.2fx", best / rows[i].step_ms) : "-"});
  }
  return "PyTorch beside overlapd (same GPUs, after the sweep):\n" + t.Render();
}

}  // namespace overlap::client
