#include "client/jobs/compare.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/format/html_chart.h"
#include "client/format/report.h"
#include "client/format/table.h"
#include "client/format/timeline.h"

namespace overlap::client {
namespace {

const v1::OpResult* FindOp(const v1::Job& job, const std::string& id) {
  for (const v1::OpResult& op : job.result().ops()) {
    if (op.id() == id) return &op;
  }
  return nullptr;
}

void Caveat(std::vector<std::string>* out, const std::string& what, const std::string& a,
            const std::string& b) {
  if (a != b) out->push_back(absl::StrCat(what, ": ", a, " -> ", b));
}

std::string Signed(double ratio) { return absl::StrFormat("%+.1f%%", 100 * (ratio - 1)); }

}  // namespace

Comparison CompareJobs(const v1::Job& a, const v1::Job& b) {
  Comparison c;
  for (const v1::OpResult& op : a.result().ops()) {
    ComparedOp row{op.id(), &op, FindOp(b, op.id()), 0};
    if (row.b != nullptr) {
      const double sa = op.step().median_ms(), sb = row.b->step().median_ms();
      if (sa > 0) row.step_ratio = sb / sa;
      c.total_a_ms += sa;
      c.total_b_ms += sb;
      if (FormatShape(op) != FormatShape(*row.b) || op.type() != row.b->type()) {
        c.caveats.push_back(absl::StrCat("op ", op.id(), ": ", op.type(), " ", FormatShape(op),
                                         " -> ", row.b->type(), " ", FormatShape(*row.b)));
      }
    }
    c.ops.push_back(row);
  }
  for (const v1::OpResult& op : b.result().ops()) {
    if (FindOp(a, op.id()) == nullptr) c.ops.push_back(ComparedOp{op.id(), nullptr, &op, 0});
  }
  const v1::JobResult &ra = a.result(), &rb = b.result();
  Caveat(&c.caveats, "backend", ra.backend(), rb.backend());
  Caveat(&c.caveats, "devices", absl::StrJoin(a.devices(), ","), absl::StrJoin(b.devices(), ","));
  const std::string dtype_a = ra.ops().empty() ? "" : ra.ops(0).dtype();
  const std::string dtype_b = rb.ops().empty() ? "" : rb.ops(0).dtype();
  Caveat(&c.caveats, "dtype", dtype_a, dtype_b);
  Caveat(&c.caveats, "launch gate", ra.launch_gate() ? "on" : "off",
         rb.launch_gate() ? "on" : "off");
  Caveat(&c.caveats, "head start", ra.head_start(), rb.head_start());
  Caveat(&c.caveats, "preheat", absl::StrFormat("%.0f ms", ra.preheat_ms()),
         absl::StrFormat("%.0f ms", rb.preheat_ms()));
  Caveat(&c.caveats, "nccl_overlap_ctas", absl::StrCat(ra.nccl_overlap_ctas()),
         absl::StrCat(rb.nccl_overlap_ctas()));
  // Layer steps timed under different schedulers (a result from before the key says nothing).
  if (!ra.layer_scheduler().empty() && !rb.layer_scheduler().empty()) {
    Caveat(&c.caveats, "scheduler", ra.layer_scheduler(), rb.layer_scheduler());
  }
  // Results stored before these were recorded have them empty: nothing to say.
  const std::pair<const char*, std::pair<std::string, std::string>> versions[] = {
      {"overlapd", {ra.overlapd_version(), rb.overlapd_version()}},
      {"gpu", {ra.gpu(), rb.gpu()}},
      {"cuda runtime", {ra.cuda_runtime(), rb.cuda_runtime()}},
      {"cuda driver", {ra.cuda_driver(), rb.cuda_driver()}},
      {"nccl", {ra.nccl(), rb.nccl()}},
      {"cublas", {ra.cublas(), rb.cublas()}}};
  for (const auto& [what, pair] : versions) {
    if (!pair.first.empty() && !pair.second.empty()) {
      Caveat(&c.caveats, what, pair.first, pair.second);
    }
  }
  if (!ra.library_env().empty() && !rb.library_env().empty()) {
    std::map<std::string, std::pair<std::string, std::string>> env;
    for (const auto& [name, value] : ra.library_env()) env[name].first = value;
    for (const auto& [name, value] : rb.library_env()) env[name].second = value;
    for (const auto& [name, values] : env) {
      // clang before 16 cannot capture a structured binding.
      const std::string& key = name;
      auto shown = [&key](const auto& map, const std::string& value) {
        return map.count(key) ? value : std::string("(unset)");
      };
      Caveat(&c.caveats, absl::StrCat("env ", name), shown(ra.library_env(), values.first),
             shown(rb.library_env(), values.second));
    }
  }
  return c;
}

std::string FormatComparison(const v1::Job& a, const v1::Job& b, const Comparison& c) {
  std::string out = absl::StrFormat("A: %s (%s)  B: %s (%s)\n", a.id(), a.name(), b.id(), b.name());
  TextTable table(Columns({Words({"OP", "TYPE", "SHAPE", "A_SCHEDULE"}), Figures({"A_STEP_MS"}),
                           Words({"B_SCHEDULE"}),
                           Figures({"B_STEP_MS", "B_VS_A", "A_EXPOSED_MS", "B_EXPOSED_MS"})}));
  std::vector<std::string> only;
  for (const ComparedOp& op : c.ops) {
    if (op.a == nullptr || op.b == nullptr) {
      only.push_back(absl::StrCat(op.id, " (only in ", op.a != nullptr ? "A" : "B", ")"));
      continue;
    }
    table.AddRow({op.id, op.a->type(), FormatShape(*op.a), ScheduleLabel(*op.a),
                  FormatMs(op.a->step().median_ms()), ScheduleLabel(*op.b),
                  FormatMs(op.b->step().median_ms()),
                  op.step_ratio > 0 ? Signed(op.step_ratio) : "-",
                  FormatMs(op.a->exposed_comm_ms()), FormatMs(op.b->exposed_comm_ms())});
  }
  table.AddSeparator();
  table.AddRow({"total", "", "", "", FormatMs(c.total_a_ms), "", FormatMs(c.total_b_ms),
                c.total_a_ms > 0 ? Signed(c.total_b_ms / c.total_a_ms) : "-"});
  out += table.Render();
  if (!only.empty()) absl::StrAppend(&out, "not compared: ", absl::StrJoin(only, ", "), "\n");
  // Where each step's time went, for the rank that finished last in each run:
  // its GEMMs (pieces and contention) and its compute stream's waiting.
  for (const ComparedOp& op : c.ops) {
    if (op.a == nullptr || op.b == nullptr || !op.a->has_timeline() || !op.b->has_timeline()) {
      continue;
    }
    const RankTimeline ra = LastRank(op.a->timeline()), rb = LastRank(op.b->timeline());
    absl::StrAppendFormat(&out,
                          "%s timelines: GEMMs %s -> %s ms, transfers %s -> %s ms, compute "
                          "stream waited %s -> %s ms\n",
                          op.id, FormatMs(ra.gemm_ms), FormatMs(rb.gemm_ms),
                          FormatMs(ra.transfer_ms), FormatMs(rb.transfer_ms),
                          FormatMs(ra.waiting_ms), FormatMs(rb.waiting_ms));
  }
  for (const std::string& caveat : c.caveats) absl::StrAppend(&out, "differs: ", caveat, "\n");
  return out;
}

nlohmann::json ComparisonJson(const v1::Job& a, const v1::Job& b, const Comparison& c) {
  nlohmann::json ops = nlohmann::json::array();
  auto side = [](const v1::OpResult* op) -> nlohmann::json {
    if (op == nullptr) return nullptr;
    nlohmann::json where = nullptr;
    if (op->has_timeline()) {
      const RankTimeline last = LastRank(op->timeline());
      where = {{"rank", last.rank},
               {"gemm_ms", last.gemm_ms},
               {"transfer_ms", last.transfer_ms},
               {"waiting_ms", last.waiting_ms}};
    }
    return {{"schedule", op->schedule()},
            {"step_ms", op->step().median_ms()},
            {"exposed_comm_ms", op->exposed_comm_ms()},
            {"hidden", op->hidden_fraction()},
            {"timeline_last_rank", where}};
  };
  for (const ComparedOp& op : c.ops) {
    ops.push_back(
        {{"id", op.id}, {"a", side(op.a)}, {"b", side(op.b)}, {"step_ratio", op.step_ratio}});
  }
  return {{"a", a.id()},
          {"b", b.id()},
          {"ops", ops},
          {"total_a_ms", c.total_a_ms},
          {"total_b_ms", c.total_b_ms},
          {"caveats", c.caveats}};
}

std::string CompareHtml(const v1::Job& a, const v1::Job& b, const Comparison& c) {
  std::vector<std::string> ops;
  ChartSeries step_a{absl::StrCat("A ", a.id()), {}}, step_b{absl::StrCat("B ", b.id()), {}};
  ChartSeries ratio{"B / A", {}};
  for (const ComparedOp& op : c.ops) {
    ops.push_back(op.id);
    step_a.values.push_back(op.a ? op.a->step().median_ms() : 0);
    step_b.values.push_back(op.b ? op.b->step().median_ms() : 0);
    ratio.values.push_back(op.step_ratio);
  }
  std::vector<HtmlSection> sections = {
      {"The two jobs' ops side by side",
       SvgBarChart({"step per op", ops, {step_a, step_b}, "ms", {}})}};
  std::vector<std::string> shared;
  ChartSeries shared_ratio{"B / A", {}};
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ratio.values[i] <= 0) continue;
    shared.push_back(ops[i]);
    shared_ratio.values.push_back(ratio.values[i]);
  }
  sections.push_back({"B against A", shared.empty()
                                         ? "<p>No op is in both jobs.</p>"
                                         : SvgBarChart({"B's step over A's (below 1: B faster)",
                                                        shared,
                                                        {shared_ratio},
                                                        "x A",
                                                        {{1, "same as A"}}})});
  // What makes them less comparable, and what either job's timings are worth.
  std::vector<std::string> caveats = c.caveats;
  for (const v1::Job* job : {&a, &b}) {
    for (const std::string& line : CaveatLines(HostTimingsNote(job->result().backend()) +
                                               SharedGpuNote(job->result().ranks_per_gpu()))) {
      if (std::find(caveats.begin(), caveats.end(), line) == caveats.end()) {
        caveats.push_back(line);
      }
    }
  }
  return HtmlPage("overlapctl compare",
                  absl::StrFormat("A %s (%s) against B %s (%s); over the ops both have %.3f ms "
                                  "against %.3f ms",
                                  a.id(), a.name(), b.id(), b.name(), c.total_a_ms, c.total_b_ms),
                  sections, caveats);
}

}  // namespace overlap::client
