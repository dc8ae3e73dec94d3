#include "client/format/report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/format/device_health.h"
#include "client/format/energy_report.h"
#include "client/format/job_reason.h"
#include "client/format/table.h"
#include "client/format/timeline.h"
#include "client/format/verify_cell.h"
#include "common/graph.h"

namespace overlap::client {
// TFLOP/s and GB/s span 0.01 (host backend) to ~800 (H200): keep three
// significant-ish digits without a column of zeros.
std::string FormatRate(double value) {
  return std::fabs(value) < 10 ? absl::StrFormat("%.3f", value) : absl::StrFormat("%.1f", value);
}

namespace {

// A failed check's VERIFY cell says only "failed" (verify_cell.h): the
// sentence under the table says against what.
std::string VerifyNotes(const v1::JobResult& result) {
  std::string out;
  for (const v1::OpResult& op : result.ops()) {
    if (!VerifyFailed(op)) continue;
    absl::StrAppendFormat(&out,
                          "%s: verify failed: max relative error %.1e against the float64 "
                          "reference, above the tolerance %.1e\n",
                          op.id(), op.max_rel_error(), op.tolerance());
  }
  return out;
}

std::string OrDash(const std::string& text) { return text.empty() ? "-" : text; }

// TFLOP/s of the job's GEMMs (2mnk each, over all ranks) done in `ms`.
double GemmTflops(const v1::JobResult& result, double ms) {
  double flops = 0;
  for (const v1::OpResult& op : result.ops()) {
    flops += 2.0 * static_cast<double>(op.m()) * static_cast<double>(op.n()) *
             static_cast<double>(op.k());
  }
  return ms > 0 ? flops / (ms * 1e9) : 0;
}

}  // namespace

bool IsCollectiveAlone(const v1::OpResult& op) {
  const absl::StatusOr<OpType> type = ParseOpType(op.type());
  return type.ok() && IsCollectiveOnly(*type);
}

bool IsGemmAlone(const v1::OpResult& op) {
  const absl::StatusOr<OpType> type = ParseOpType(op.type());
  return type.ok() && IsGemmOnly(*type);
}

bool HasCommToHide(const v1::OpResult& op) {
  // A serial schedule hides nothing by design: a step under GEMM alone by
  // noise must not read as 100% hidden.
  return !IsCollectiveAlone(op) && !IsGemmAlone(op) && op.comm_alone().median_ms() > 0 &&
         op.mode() != "serial";
}

// What the step could take at best with nothing else in it: its GEMMs alone
// and its activation passes alone, back to back. "" without a GEMM.
std::string FormatLayerLimit(const v1::JobResult& result, double layer_ms) {
  double gemms_ms = 0;
  for (const v1::OpResult& op : result.ops()) {
    if (!IsCollectiveAlone(op)) gemms_ms += op.gemm_alone().median_ms();
  }
  if (gemms_ms <= 0) return "";
  const double limit_ms = gemms_ms + result.layer_activation_ms();
  return absl::StrFormat(
      "layer limit: %s ms (its GEMMs alone %s + activation passes %s); the step %+.1f%%\n",
      FormatMs(limit_ms), FormatMs(gemms_ms), FormatMs(result.layer_activation_ms()),
      100 * (layer_ms / limit_ms - 1));
}

std::string FormatLayerStep(const v1::JobResult& result) {
  if (!result.layer_note().empty()) return absl::StrCat("layer: ", result.layer_note(), "\n");
  const double layer = result.layer_step().median_ms();
  if (layer <= 0) return "";
  std::string out = absl::StrFormat("layer: %s ms as one step", FormatMs(layer));
  if (result.layer_deferred_size() > 0) {
    // Each side op with where it joined back: "x_gather until wgrad1, grads to the end".
    std::vector<std::string> side;
    for (int i = 0; i < result.layer_deferred_size(); ++i) {
      const bool joined =
          i < result.layer_joined_before_size() && !result.layer_joined_before(i).empty();
      side.push_back(absl::StrCat(result.layer_deferred(i), joined ? " until " : " to the end",
                                  joined ? result.layer_joined_before(i) : ""));
    }
    absl::StrAppend(
        &out, " (beside the ops after them on a side stream: ", absl::StrJoin(side, ", "), ")");
  }
  if (result.total_step_ms() > 0) {
    absl::StrAppendFormat(&out, ", %s ms op by op: %+.1f%%", FormatMs(result.total_step_ms()),
                          100 * (layer / result.total_step_ms() - 1));
  }
  if (const double tflops = GemmTflops(result, layer); tflops > 0) {
    absl::StrAppend(&out, "; ", FormatRate(tflops), " TFLOP/s");
  }
  absl::StrAppendFormat(&out, "; exposed comm %s ms (op by op %s)",
                        FormatMs(result.layer_exposed_comm_ms()),
                        FormatMs(result.total_exposed_comm_ms()));
  // Elementwise work on the main streams: neither GEMM nor communication.
  if (result.layer_activation_ms() > 0) {
    absl::StrAppendFormat(&out, ", activation passes %s ms apart",
                          FormatMs(result.layer_activation_ms()));
  }
  out += "\n";
  out += FormatLayerLimit(result, layer);
  std::vector<std::string> ops_order;
  for (const v1::OpResult& op : result.ops()) ops_order.push_back(op.id());
  const std::vector<std::string> layer_order(result.layer_order().begin(),
                                             result.layer_order().end());
  if (!layer_order.empty() && layer_order != ops_order) {
    absl::StrAppend(&out, "layer order (critical-path collectives first): ",
                    absl::StrJoin(layer_order, ", "), "\n");
  }
  return out;
}

// What the layer step deferred, how, and how much of it hid:
// "deferred: grads whole to the end (0.8 ms alone), big chunked 4 x 256 KiB until
// dgrad3 (1.2 ms); 85% hidden (layer 5.1 ms, 4.4 ms without them)".
std::string FormatDeferrals(const v1::JobResult& result) {
  if (result.layer_deferrals_size() == 0) return "";
  std::vector<std::string> parts;
  for (const v1::LayerDeferral& d : result.layer_deferrals()) {
    std::string how = d.how();
    if (d.how() == "chunked") {
      absl::StrAppend(&how, " ", d.pieces(), " x ", FormatByteSize(d.piece_bytes()));
    }
    parts.push_back(absl::StrFormat(
        "%s %s %s (%s ms alone)", d.op(), how,
        d.joined_before().empty() ? "to the end" : absl::StrCat("until ", d.joined_before()),
        FormatMs(d.alone_ms())));
  }
  return absl::StrFormat("deferred: %s; %.0f%% hidden (layer %s ms, %s ms without them)\n",
                         absl::StrJoin(parts, ", "), 100 * result.layer_deferred_hidden_fraction(),
                         FormatMs(result.layer_step().median_ms()),
                         FormatMs(result.layer_step_without_deferred().median_ms()));
}

// scheduler: dynamic: how the run-time dispatcher sent each deferred
// collective and whether priority held, per device.
std::string FormatDispatch(const v1::JobResult& result) {
  if (result.layer_scheduler() != "dynamic") return "";
  std::string out = absl::StrCat(
      "scheduler: dynamic (deferred collectives dispatched at run time on the deferred lane; the "
      "step ran live, not from a captured graph)\nlanes: ",
      result.lanes(), "\n");
  TextTable table(Columns({Words({"DEFERRED"}),
                           Figures({"CHUNKS", "READY_MS", "FIRST_CHUNK_MS", "FINISHED_MS",
                                    "WORST_DELAY_MS", "BOUND_MS"}),
                           Words({"BOUND"}), Figures({"YIELDED", "FORCED"})}));
  for (const v1::LayerDeferral& d : result.layer_deferrals()) {
    if (!d.dispatched()) continue;
    table.AddRow(
        {d.op(), absl::StrCat(d.pieces()), FormatMs(d.ready_ms()), FormatMs(d.first_chunk_ms()),
         FormatMs(d.finished_ms()), FormatMs(d.worst_delay_ms()), FormatMs(d.bound_ms()),
         d.worst_delay_ms() <= d.bound_ms()
             ? "met"
             : absl::StrCat("missed by ", FormatMs(d.worst_delay_ms() - d.bound_ms()), " ms"),
         absl::StrCat(d.chunks_yielded()), absl::StrCat(d.chunks_forced())});
  }
  absl::StrAppend(&out, "deferred lane, medians of ", result.layer_dispatch_iterations(),
                  " dispatched iterations (ms from the iteration's start; chunks yielded and "
                  "forced summed over them):\n",
                  table.Render());
  std::vector<std::string> devices;
  for (const v1::LaneFigures& f : result.lane_figures()) {
    devices.push_back(absl::StrFormat("device %d %s ms (lane busy %s ms)", f.device(),
                                      FormatMs(f.inversion_ms()), FormatMs(f.deferred_busy_ms())));
  }
  if (!devices.empty()) {
    absl::StrAppend(&out,
                    "deferred chunks beside critical collectives (priority inversion, at most): ",
                    absl::StrJoin(devices, ", "), "\n");
  }
  for (const std::string& note : result.scheduler_notes()) {
    absl::StrAppend(&out, "scheduler note: ", note, "\n");
  }
  return out;
}

// The chains the layer step verified end to end:
// "chains verified against float64: fc1 -swiglu-> fc2 3.1e-03 (tolerance 4.5e-02)".
std::string FormatChains(const v1::JobResult& result) {
  if (result.layer_chains_size() == 0) return "";
  std::vector<std::string> parts;
  for (const v1::LayerChainCheck& c : result.layer_chains()) {
    parts.push_back(
        absl::StrFormat("%s %.1e (tolerance %.1e)", c.chain(), c.max_rel_error(), c.tolerance()));
  }
  return absl::StrCat("chains verified against float64: ", absl::StrJoin(parts, "; "), "\n");
}

// How each op of the layer step that reads another's output got its input:
// "layer edges: fc2 alias, fc3 fused swiglu" (alias: the producer's output
// buffer read where it is, no copy and no launch).
std::string FormatEdges(const v1::JobResult& result) {
  std::vector<std::string> parts;
  bool epilogue = false;
  for (const v1::OpResult& op : result.ops()) {
    if (!op.edge().empty()) parts.push_back(absl::StrCat(op.id(), " ", op.edge()));
    epilogue = epilogue || absl::StartsWith(op.edge(), "epilogue");
  }
  if (parts.empty()) return "";
  return absl::StrCat("layer edges (alias: read in place, no copy",
                      epilogue ? "; epilogue: written by the producer's GEMM, no pass" : "",
                      "): ", absl::StrJoin(parts, ", "), "\n");
}

// What the overlap pass did: "overlap pass: fused fc1_gather + fc1 into fc1
// (ag_gemm); left alone: fc2 + fc2_rs (fuse: false)".
std::string FormatFusions(const v1::JobResult& result) {
  std::vector<std::string> fused, alone;
  for (const v1::Fusion& f : result.fusions()) {
    const std::string pair = f.fused_type() == "ag_gemm"
                                 ? absl::StrCat(f.collective(), " + ", f.gemm())
                                 : absl::StrCat(f.gemm(), " + ", f.collective());
    if (f.fused()) {
      fused.push_back(absl::StrCat(pair, " into ", f.gemm(), " (", f.fused_type(), ")"));
    } else {
      alone.push_back(absl::StrCat(pair, " (", f.why_not(), ")"));
    }
  }
  if (fused.empty() && alone.empty()) return "";
  std::string out = "overlap pass:";
  if (!fused.empty()) absl::StrAppend(&out, " fused ", absl::StrJoin(fused, ", "));
  if (!alone.empty()) {
    absl::StrAppend(&out, fused.empty() ? "" : ";", " left alone ", absl::StrJoin(alone, ", "));
  }
  return out + "\n";
}

std::string FormatFusionComparison(const v1::Job& fused, const v1::Job& unfused) {
  std::string out = "the graph with the overlap pass and without it:\n";
  absl::StrAppendFormat(&out, "  %-8s %-12s %4s %13s %12s %16s\n", "PASS", "JOB", "OPS",
                        "LAYER_STEP_MS", "OP_BY_OP_MS", "EXPOSED_MS");
  for (const auto& [label, job] :
       {std::pair<const char*, const v1::Job*>{"fused", &fused}, {"unfused", &unfused}}) {
    const v1::JobResult& r = job->result();
    absl::StrAppendFormat(&out, "  %-8s %-12s %4d %13s %12s %16s\n", label, job->id(), r.ops_size(),
                          FormatMs(r.layer_step().median_ms()), FormatMs(r.total_step_ms()),
                          FormatMs(r.layer_exposed_comm_ms()));
  }
  const double a = fused.result().layer_step().median_ms();
  const double b = unfused.result().layer_step().median_ms();
  if (a > 0 && b > 0) {
    absl::StrAppendFormat(&out, "fused: %+.1f%% layer step against unfused\n", 100 * (a / b - 1));
  }
  return out + FormatFusions(fused.result());
}

std::string FormatSchedulerComparison(const v1::Job& planned, const v1::Job& dynamic) {
  std::string out =
      "the layer step's deferred collectives planned (static) and dispatched at run "
      "time (dynamic):\n";
  TextTable table(
      Columns({Words({"SCHEDULER", "JOB"}),
               Figures({"LAYER_STEP_MS", "WITHOUT_DEFERRED_MS", "WITH/WITHOUT", "DEFERRED_HIDDEN_%",
                        "WORST_DELAY_MS", "CHUNKS_YIELDED", "CHUNKS_FORCED", "INVERSION_MS"})}));
  for (const v1::Job* job : {&planned, &dynamic}) {
    const v1::JobResult& r = job->result();
    const bool dispatched = r.layer_scheduler() == "dynamic";
    double worst = 0, inversion = 0;
    int yielded = 0, forced = 0;
    for (const v1::LayerDeferral& d : r.layer_deferrals()) {
      worst = std::max(worst, d.worst_delay_ms());
      yielded += d.chunks_yielded();
      forced += d.chunks_forced();
    }
    for (const v1::LaneFigures& f : r.lane_figures())
      inversion = std::max(inversion, f.inversion_ms());
    table.AddRow({r.layer_scheduler(), job->id(), FormatMs(r.layer_step().median_ms()),
                  FormatMs(r.layer_step_without_deferred().median_ms()),
                  r.layer_step_without_deferred().median_ms() > 0
                      ? absl::StrFormat("%.3fx", r.layer_step().median_ms() /
                                                     r.layer_step_without_deferred().median_ms())
                      : "-",
                  absl::StrFormat("%.0f", 100 * r.layer_deferred_hidden_fraction()),
                  dispatched ? FormatMs(worst) : "-", dispatched ? absl::StrCat(yielded) : "-",
                  dispatched ? absl::StrCat(forced) : "-", dispatched ? FormatMs(inversion) : "-"});
  }
  out += table.Render();
  const double a = planned.result().layer_step().median_ms();
  const double b = dynamic.result().layer_step().median_ms();
  if (a > 0 && b > 0) {
    absl::StrAppendFormat(&out, "dynamic: %+.1f%% layer step against static\n", 100 * (b / a - 1));
  }
  return out + FormatDispatch(dynamic.result());
}

// Each mesh op's groups, which ran at once, and the slowest:
// "mesh tp 2 x dp 2: fc1 (tp) 0.31 / 0.35* ms; grads (dp) 0.12 / 0.11 ms (* slowest)".
std::string FormatMeshGroups(const v1::JobResult& result) {
  if (result.mesh_tp() <= 0) return "";
  std::vector<std::string> ops;
  for (const v1::OpResult& op : result.ops()) {
    if (op.group_step_ms_size() < 2) continue;
    std::vector<std::string> steps;
    for (int g = 0; g < op.group_step_ms_size(); ++g) {
      steps.push_back(
          absl::StrCat(FormatMs(op.group_step_ms(g)), g == op.slowest_group() ? "*" : ""));
    }
    ops.push_back(
        absl::StrCat(op.id(), " (", op.group(), ") ", absl::StrJoin(steps, " / "), " ms"));
  }
  std::string out = absl::StrCat("mesh: tp ", result.mesh_tp(), " x dp ", result.mesh_dp());
  if (ops.empty()) return out + "\n";
  return absl::StrCat(
      out, "; each group's step, all at once (* the slowest): ", absl::StrJoin(ops, "; "), "\n");
}

// A job over nodes: a line per node, the bus bandwidth across nodes and the
// slowest rank:
// "node 0 127.0.0.1:7071 (job-000002): ranks 0-1, ops 1.234 ms, layer 1.5 ms, slowest rank 1".
std::string FormatNodes(const v1::JobResult& result) {
  if (result.node_results_size() == 0) return "";
  std::string out;
  for (const v1::NodeResult& node : result.node_results()) {
    absl::StrAppend(&out, absl::StrFormat("node %d %s (%s): ranks %d-%d, ops %s ms",
                                          node.node_index(), node.node(), OrDash(node.part_id()),
                                          node.first_rank(), node.first_rank() + node.ranks() - 1,
                                          FormatMs(node.total_step_ms())));
    if (node.layer_step_ms() > 0)
      absl::StrAppend(&out, ", layer ", FormatMs(node.layer_step_ms()), " ms");
    if (node.slowest_rank() >= 0) absl::StrAppend(&out, ", slowest rank ", node.slowest_rank());
    out += "\n";
  }
  std::vector<std::string> spanning;
  for (const v1::OpResult& op : result.ops()) {
    if (op.spans_nodes()) spanning.push_back(op.id());
  }
  if (!spanning.empty()) {
    absl::StrAppend(&out, "across nodes: ", absl::StrJoin(spanning, ", "));
    if (result.inter_node_busbw_gbps() > 0) {
      absl::StrAppend(&out, "; bus bandwidth ", FormatRate(result.inter_node_busbw_gbps()),
                      " GB/s");
    }
    out += "\n";
  }
  if (!result.slowest_node().empty()) {
    absl::StrAppend(&out, "slowest rank: ", result.slowest_rank(), " on ", result.slowest_node(),
                    " (the largest GEMM alone)\n");
  }
  return out;
}

std::string FormatShape(const v1::OpResult& op) {
  if (IsCollectiveAlone(op)) return absl::StrCat(op.m(), "x-x", op.n());
  return absl::StrCat(op.m(), "x", op.k(), "x", op.n());
}

namespace {

int64_t ElapsedEndMs(const v1::Job& job, int64_t now_ms) {
  return job.end_time_ms() > 0 ? job.end_time_ms() : now_ms;
}

}  // namespace

bool IsDamaged(const v1::Job& job) {
  return job.error_code() == static_cast<int32_t>(absl::StatusCode::kDataLoss);
}

std::string ListedState(const v1::Job& job) {
  return IsDamaged(job) ? "DAMAGED" : JobStateName(job.state());
}

std::string JobStateName(v1::JobState state) {
  if (state == v1::JOB_STATE_UNSPECIFIED) return "UNSPECIFIED";
  const std::string& name = v1::JobState_Name(state);
  return name.empty() ? absl::StrCat("STATE_", static_cast<int>(state)) : name;
}

bool IsFinalState(v1::JobState state) {
  return state == v1::SUCCEEDED || IsUnsuccessfulState(state);
}

bool IsUnsuccessfulState(v1::JobState state) {
  return state == v1::FAILED || state == v1::CANCELLED || state == v1::ABORTED;
}

std::string ScheduleLabel(const v1::OpResult& op) {
  // Results stored by a daemon older than the `schedule` field have only the parts.
  const std::string name =
      op.schedule().empty() ? absl::StrCat(op.mode(), "/", op.transport()) : op.schedule();
  return absl::StrCat(name, op.graph_replay() ? "+graph" : "");
}

// When the step is slower than GEMM alone plus the whole collective
// (contention, noise) the raw fraction goes negative; none of the collective
// was hidden, so print 0. The JSON form keeps the raw value.
std::string FormatHidden(double fraction) {
  return absl::StrFormat("%.1f", std::clamp(fraction, 0.0, 1.0) * 100);
}

std::string FormatMs(double ms) { return absl::StrFormat("%.3f", ms); }

std::string FormatUtc(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(unix_ms), absl::UTCTimeZone());
}

std::string FormatDuration(double seconds) {
  if (seconds < 0) seconds = 0;
  if (seconds < 1) return absl::StrFormat("%.0f ms", seconds * 1000);
  return absl::StrFormat("%.1f s", seconds);
}

std::string FormatSeconds(double seconds) {
  return absl::StrFormat("%.1f", std::max(0.0, seconds));
}

std::string SharedGpuNote(int ranks_per_gpu) {
  if (ranks_per_gpu <= 1) return "";
  return absl::StrCat("ranks share GPUs (ranks_per_gpu ", ranks_per_gpu,
                      "): every output is checked as usual, but a GPU's ranks share its SMs, "
                      "memory and copy engines and copies stand in for NCCL between them, so "
                      "these timings say nothing about a node with a GPU per rank\n");
}

std::string HostTimingsNote(const std::string& backend) {
  if (backend != "host") return "";
  return "host backend: the timings mean nothing: its \"GPUs\" are threads sharing the CPU "
         "cores, so only the checks (VERIFY) count; run it on GPU nodes for times\n";
}

std::string FormatReportHeader(const v1::Job& job) {
  const auto& ops = job.result().ops();
  const std::string tp = ops.empty() ? std::string("-") : absl::StrCat(ops[0].tp());
  const std::string dtype = ops.empty() ? std::string("-") : OrDash(ops[0].dtype());
  return absl::StrCat("job ", job.id(), "  name: ", OrDash(job.name()),
                      "  backend: ", OrDash(job.result().backend()), "  tp: ", tp,
                      "  dtype: ", dtype, "\n");
}

size_t FastestIndex(const std::vector<double>& ms) {
  size_t fastest = ms.size();
  for (size_t i = 0; i < ms.size(); ++i) {
    if (ms[i] > 0 && (fastest == ms.size() || ms[i] < ms[fastest])) fastest = i;
  }
  return fastest;
}

std::vector<size_t> SlowerThanFastest(const std::vector<double>& ms) {
  std::vector<size_t> slow;
  const size_t fastest = FastestIndex(ms);
  for (size_t i = 0; fastest < ms.size() && i < ms.size(); ++i) {
    if (ms[i] > ms[fastest] * (1 + kSlowRankFraction)) slow.push_back(i);
  }
  return slow;
}

std::string SlowRankNote(const std::vector<double>& ms, const std::vector<int>& devices) {
  const std::vector<size_t> slow = SlowerThanFastest(ms);
  if (slow.empty()) return "";
  const size_t fastest = FastestIndex(ms);
  const size_t slowest = *std::max_element(slow.begin(), slow.end(),
                                           [&](size_t a, size_t b) { return ms[a] < ms[b]; });
  auto name = [&](size_t rank) {
    return rank < devices.size() ? absl::StrCat("rank ", rank, " (device ", devices[rank], ")")
                                 : absl::StrCat("rank ", rank);
  };
  return absl::StrFormat("%s: GEMM alone %.3f ms, %.1f%% above %s's %.3f ms", name(slowest),
                         ms[slowest], 100 * (ms[slowest] / ms[fastest] - 1), name(fastest),
                         ms[fastest]);
}

std::string FormatCandidates(const v1::OpResult& op, size_t shown) {
  const auto& c = op.candidates();
  if (c.empty()) return "";
  const double best = c[0].best_ms();
  auto part = [&](int i) {
    std::string p = absl::StrFormat("%s %.3f", c[i].schedule(), c[i].best_ms());
    if (i > 0 && best > 0) {
      absl::StrAppendFormat(&p, " (%+.1f%%)", 100 * (c[i].best_ms() / best - 1));
    }
    return p;
  };
  std::vector<std::string> parts;
  int serial = -1;
  for (int i = 0; i < c.size(); ++i) {
    if (static_cast<size_t>(i) < shown) parts.push_back(part(i));
    if (c[i].schedule() == "serial/nccl") serial = i;
  }
  if (static_cast<size_t>(c.size()) > shown) {
    parts.push_back("...");
    if (serial >= static_cast<int>(shown)) parts.push_back(part(serial));
  }
  return absl::StrJoin(parts, ", ");
}

std::string FormatReport(const v1::Job& job) {
  std::string out = FormatReportHeader(job);
  const v1::JobResult& result = job.result();
  out += SharedGpuNote(result.ranks_per_gpu());
  if (result.ops().empty()) {
    absl::StrAppend(&out, "state: ", JobStateName(job.state()));
    if (!job.error().empty()) absl::StrAppend(&out, "  error: ", job.error());
    absl::StrAppend(&out, "\n");
    return out;
  }
  // Past 120 columns the host's enqueue time goes first, then the rates and
  // the parts of the step the exposed figure already sums up.
  TextTable table(Columns(
      {Words({"OP", "TYPE", "SHAPE", "MODE"}), Figures({"CHUNKS"}, 2), Words({"TRANSPORT"}),
       Figures({"STEP_MS"}), Figures({"HOST_MS"}, 6), Figures({"GEMM_ALONE_MS"}, 1),
       Figures({"COMM_ALONE_MS"}, 3), Figures({"EXPOSED_MS", "HIDDEN_%"}), Figures({"TFLOPS"}, 4),
       Figures({"BUSBW_GBPS"}, 5), Figures({"MAX_REL_ERR"}, 7), Words({"VERIFY"})}));
  for (const v1::OpResult& op : result.ops()) {
    const bool gemm = !IsCollectiveAlone(op);
    const bool comm = !IsGemmAlone(op);
    table.AddRow({op.id(), op.type(), FormatShape(op), OrDash(op.mode()),
                  op.chunks() > 0 ? absl::StrCat(op.chunks()) : "-",
                  comm ? OrDash(TransportLabel(op)) : "-", FormatMs(op.step().median_ms()),
                  FormatMs(op.host_enqueue_ms()),
                  gemm ? FormatMs(op.gemm_alone().median_ms()) : "-",
                  comm ? FormatMs(op.comm_alone().median_ms()) : "-",
                  comm ? FormatMs(op.exposed_comm_ms()) : "-",
                  HasCommToHide(op) ? FormatHidden(op.hidden_fraction()) : "-",
                  gemm ? FormatRate(op.tflops()) : "-", comm ? FormatRate(op.busbw_gbps()) : "-",
                  FormatRelError(op), FormatVerify(op)});
  }
  table.AddSeparator();
  const double total_tflops = GemmTflops(result, result.total_step_ms());
  table.AddRow({"total", "", "", "", "", "", FormatMs(result.total_step_ms()), "", "", "",
                FormatMs(result.total_exposed_comm_ms()), "",
                total_tflops > 0 ? FormatRate(total_tflops) : ""});
  out += table.Render();
  absl::StrAppend(&out, VerifyNotes(result), FormatNodes(result), FormatMeshGroups(result),
                  FormatLayerStep(result), FormatDeferrals(result), FormatDispatch(result),
                  FormatChains(result), FormatEdges(result), FormatFusions(result),
                  FormatEnergy(result));
  std::vector<std::string> one_schedule;  // auto had nothing to choose for these
  for (const v1::OpResult& op : result.ops()) {
    if (op.requested_mode() != "auto" || IsGemmAlone(op)) continue;
    if (op.auto_reason() == kOnlyOneSchedule) {
      one_schedule.push_back(op.id());
      continue;
    }
    absl::StrAppend(&out, op.id(), ": auto chose ", ScheduleLabel(op));
    if (!op.auto_reason().empty()) absl::StrAppend(&out, ": ", op.auto_reason());
    absl::StrAppend(&out, "\n");
    if (const std::string c = FormatCandidates(op); !c.empty()) {
      absl::StrAppend(&out, op.id(), ": measured ", c, "\n");
    }
  }
  if (!one_schedule.empty()) {
    const bool one_gpu = result.ops(0).tp() == 1;
    absl::StrAppend(&out, "auto: ", absl::StrJoin(one_schedule, ", "),
                    one_schedule.size() == 1 ? " has" : " have", " one schedule to run",
                    one_gpu ? " (one GPU: nothing to overlap)" : "", "\n");
  }
  // Where the step's time went: only ops with a GEMM and a collective have
  // anything to break down.
  bool timelines = false;
  for (const v1::OpResult& op : result.ops()) {
    if (IsGemmAlone(op) || IsCollectiveAlone(op)) continue;
    const std::string note = FormatTimelineNote(op);
    absl::StrAppend(&out, note);
    timelines = timelines || !note.empty();
  }
  if (const std::string note = FormatLayerTimelineNote(result); !note.empty()) {
    absl::StrAppend(&out, note);
    timelines = true;
  }
  if (timelines) {
    absl::StrAppend(&out, "timeline: `overlapctl timeline ", job.id(),
                    "` charts each traced iteration (--output-file FILE: a Chrome trace)\n");
  }
  // Host-backend ranks are threads sharing CPU cores: their spread is the OS
  // scheduler's, not a slow GPU's.
  // Ranks that share a GPU run their GEMMs alone one after the other.
  const bool gpu_ranks = result.backend() != "host" && result.ranks_per_gpu() <= 1;
  for (const v1::OpResult& op : result.ops()) {
    if (!gpu_ranks) break;
    const std::string slow =
        SlowRankNote({op.gemm_alone_rank_ms().begin(), op.gemm_alone_rank_ms().end()},
                     {job.devices().begin(), job.devices().end()});
    if (slow.empty()) continue;
    absl::StrAppend(&out, op.id(), ": slow GPU? ", slow,
                    " (`overlapctl node` shows its clocks, power and temperature)\n");
  }
  if (!result.launch_gate()) {
    absl::StrAppend(&out,
                    "timing: ungated (launch_gate off, or a daemon before launch gates): step "
                    "times include the host's enqueue latency\n");
  }
  if (result.head_start() == "idle") {
    absl::StrAppend(&out,
                    "timing: idle head start: the GPUs waited while the host enqueued each "
                    "iteration, and a rested GPU runs faster\n");
  }
  if (result.nccl_overlap_ctas() > 0) {
    absl::StrAppend(&out, "NCCL beside a GEMM: at most ", result.nccl_overlap_ctas(),
                    " CTAs, the GEMM leaves their SMs free\n");
  }
  if (!job.error().empty()) absl::StrAppend(&out, "error: ", job.error(), "\n");
  return out;
}

std::string FormatJobLine(const v1::Job& job) {
  std::string line =
      absl::StrCat(job.id(), "  ", JobStateName(job.state()), "  ", OrDash(job.name()));
  if (!job.error().empty()) absl::StrAppend(&line, "  error: ", job.error());
  return line + "\n";
}

namespace {

// Who submitted the job, as a list shows it: the user's name where known.
std::string OwnerOf(const v1::Job& job) {
  return job.owner_name().empty() ? job.owner() : job.owner_name();
}

// A name as long as a graph allows (256 bytes) would widen every row.
// Output that is no terminal (TableWidth() 0) gets it whole.
std::string ListName(const std::string& name) {
  constexpr size_t kMaxChars = 40;
  if (name.size() <= kMaxChars || TableWidth() == 0) return name;
  size_t cut = kMaxChars - 3;
  while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;
  return name.substr(0, cut) + "...";
}

// What a list's DEVICES cell says, in one word: a job of this node its devices; a job
// spanning daemons its nodes too (a coordinator's job holds no device: its
// parts do, on its nodes): `0,1@node1;nodes=a:7070,b:7070`.
std::string ListPlace(const v1::Job& job) {
  const std::string devices = absl::StrJoin(job.devices(), ",");
  if (job.nodes_size() == 0) return devices.empty() ? "-" : devices;
  const std::string nodes = absl::StrCat("nodes=", absl::StrJoin(job.nodes(), ","));
  if (job.coordinator().empty()) return nodes;
  return absl::StrCat(devices.empty() ? "-" : devices, "@node", job.node_index(), ";", nodes);
}

}  // namespace

std::string FormatJobList(const google::protobuf::RepeatedPtrField<v1::Job>& jobs, int64_t now_ms) {
  TextTable table(Columns({Words({"ID", "STATE", "OWNER", "NAME"}), Figures({"PRIO"}, 3),
                           Words({"DEVICES"}), Figures({"OPS"}, 2), Words({"SUBMITTED"}),
                           Figures({"DURATION_S"}), Figures({"STEP_MS"}, 1), Words({"REASON"})}));
  // Jobs this node coordinates, by global id: their parts here are not rows of their own.
  std::set<std::string> coordinated;
  std::string notes;  // -o wide: each REASON's whole text
  for (const v1::Job& job : jobs) {
    if (job.nodes_size() > 0 && job.coordinator().empty() && !job.global_id().empty()) {
      coordinated.insert(job.global_id());
    }
  }
  for (const v1::Job& job : jobs) {
    if (!job.coordinator().empty() && coordinated.count(job.global_id()) > 0) continue;
    const bool started = job.start_time_ms() > 0;
    const int ops = std::max(job.ops_finished(), job.result().ops_size());
    const bool has_result = ops > 0;
    table.AddRow(
        {job.global_id().empty() ? job.id() : job.global_id(), ListedState(job),
         OrDash(WordCell(ListName(OwnerOf(job)))), OrDash(WordCell(ListName(job.name()))),
         absl::StrCat(job.priority()), ListPlace(job), has_result ? absl::StrCat(ops) : "-",
         FormatUtc(job.submit_time_ms()),
         started ? FormatSeconds((ElapsedEndMs(job, now_ms) - job.start_time_ms()) / 1000.0) : "-",
         has_result ? FormatMs(job.result().total_step_ms()) : "-", ReasonSlug(job)});
    if (const std::string text = ReasonText(job); WideOutput() && !text.empty()) {
      // Not led by the id, so that a script matching rows by their id skips it.
      absl::StrAppend(&notes, "reason of ", job.global_id().empty() ? job.id() : job.global_id(),
                      ": ", text, "\n");
    }
  }
  return table.Render() + notes;
}

std::string FormatProgress(const v1::Progress& progress) {
  std::string line = absl::StrCat("[", progress.op_index() + 1, "/", progress.op_count(), "] ",
                                  OrDash(progress.op_id()), " ", OrDash(progress.phase()));
  if (progress.iterations() > 0) {
    absl::StrAppend(&line, " ", progress.iteration(), "/", progress.iterations());
  }
  return line;
}

std::string FormatJobDetail(const v1::Job& job, int64_t now_ms) {
  std::string out;
  auto field = [&out](const std::string& key, const std::string& value) {
    absl::StrAppend(&out, absl::StrFormat("%-10s %s\n", key + ":", value));
  };
  field("id", job.id());
  if (!job.global_id().empty()) field("global id", job.global_id());
  field("name", OrDash(job.name()));
  field("owner", job.owner().empty() ? "-"
                 : job.owner_name().empty() || job.owner_name() == job.owner()
                     ? job.owner()
                     : absl::StrCat(job.owner_name(), " (", job.owner(), ")"));
  field("state", IsDamaged(job) ? absl::StrCat("DAMAGED (stored as ", JobStateName(job.state()),
                                               "; its spec and results are lost)")
                                : JobStateName(job.state()));
  if (!job.waiting().empty()) field("waiting", job.waiting());
  field("priority", absl::StrCat(job.priority()));
  field("class", job.priority_class() == v1::DEFERRED ? "deferred" : "critical");
  field("devices", job.devices().empty() ? "-" : absl::StrJoin(job.devices(), ","));
  if (job.nodes_size() > 0) field("nodes", absl::StrJoin(job.nodes(), ","));
  if (!job.coordinator().empty()) {
    field("part of",
          absl::StrCat(job.global_job_id(), " on its coordinator ", job.coordinator(),
                       " (this is node ", job.node_index(), " of ", job.nodes_size(), ")"));
  }
  field("submitted", FormatUtc(job.submit_time_ms()));
  field("started", FormatUtc(job.start_time_ms()));
  field("ended", FormatUtc(job.end_time_ms()));
  if (job.start_time_ms() > 0) {
    field("duration", FormatDuration((ElapsedEndMs(job, now_ms) - job.start_time_ms()) / 1000.0));
  }
  if (job.state() == v1::RUNNING && job.has_progress()) {
    field("progress", FormatProgress(job.progress()));
  }
  if (!job.error().empty()) field("error", job.error());
  const v1::JobResult& r = job.result();
  if (!r.overlapd_version().empty()) {
    // What ran it, as recorded with the result.
    field("ran on", absl::StrCat(OrDash(r.gpu()), "; overlapd ", r.overlapd_version(), "; cuda ",
                                 OrDash(r.cuda_runtime()), ", driver ", OrDash(r.cuda_driver()),
                                 "; nccl ", OrDash(r.nccl()), "; cublas ", OrDash(r.cublas())));
  }
  if (r.ops_size() > 0) absl::StrAppend(&out, "\n", FormatReport(job));
  return out;
}

std::string FormatNodeInfo(const v1::GetNodeInfoResponse& node) {
  std::string out;
  auto field = [&out](const std::string& key, const std::string& value) {
    if (!value.empty()) absl::StrAppend(&out, absl::StrFormat("%-9s %s\n", key + ":", value));
  };
  field("backend", node.backend());
  field("healthy", node.healthy() ? "yes" : "no");
  field("hostname", node.hostname());
  field("version", absl::StrCat(node.overlapd_version(),
                                node.git_commit().empty() ? "" : " (" + node.git_commit() + ")"));
  field("listen", node.listen_address());
  field("state", node.state_dir());
  field("cuda", node.cuda_runtime_version().empty()
                    ? ""
                    : absl::StrCat("runtime ", node.cuda_runtime_version(), ", driver ",
                                   OrDash(node.cuda_driver_version())));
  field("nccl", node.nccl_version());
  if (node.ranks_per_gpu() > 1) {
    field("ranks", absl::StrCat(node.ranks_per_gpu(),
                                " per GPU (config ranks_per_gpu): for checking schedules, not "
                                "timing them"));
  }
  std::vector<std::string> env;
  for (const auto& [name, value] :
       std::map<std::string, std::string>(node.library_env().begin(), node.library_env().end())) {
    env.push_back(absl::StrCat(name, "=", value));
  }
  field("env", absl::StrJoin(env, " "));
  field("cublas", node.cublas_version());
  field("lanes", node.lanes());
  if (node.has_flight_recorder()) {
    const v1::FlightRecorderUsage& flight = node.flight_recorder();
    field("flight", absl::StrCat(flight.entries(), " collectives in ", flight.rings(), " rings, ",
                                 flight.bytes(), " B (cap ", flight.entries_per_ring(), " a ring, ",
                                 flight.cap_bytes(), " B at that)"));
  }
  if (!node.node_name().empty()) {
    // Jobs across daemons: who this daemon is to its peers, and what carries them.
    field("peer", absl::StrCat(node.node_name(), "; peers: ",
                               node.peers().empty() ? "none" : absl::StrJoin(node.peers(), ", "),
                               "; between daemons: ", OrDash(node.cross_daemon_transport()),
                               node.cross_daemon_note().empty()
                                   ? ""
                                   : absl::StrCat(" (", node.cross_daemon_note(), ")")));
  }
  absl::StrAppend(&out, "devices:  ", node.devices_size(), "\n");
  bool telemetry = false;
  for (const v1::Device& device : node.devices()) telemetry = telemetry || device.telemetry_valid();
  // POOL is what jobs may use (config pool_bytes_per_device), a part of MEMORY.
  std::vector<TextTable::Column> columns = {{"INDEX", Align::kRight},     {"NAME"},
                                            {"MEMORY", Align::kRight},    {"POOL", Align::kRight},
                                            {"POOL_USED", Align::kRight}, {"PCI"}};
  if (telemetry) {
    for (const char* title : {"SM_MHZ", "MAX_MHZ", "MEM_MHZ", "TEMP_C", "POWER_W", "UTIL_%"}) {
      columns.push_back({title, Align::kRight});
    }
    columns.push_back({"CLOCK_LIMITS"});
  }
  // Energy and NVLink bytes, where some GPU has them: cumulative since the
  // driver loaded (the metrics' rate() gives power and NVLink throughput).
  bool energy = false;
  for (const v1::Device& device : node.devices()) {
    energy = energy || device.energy_valid() || device.nvlink_traffic_valid();
  }
  if (energy) {
    for (const char* title : {"ENERGY_KJ", "NVLINK_TX_GB", "NVLINK_RX_GB"}) {
      columns.push_back({title, Align::kRight});
    }
  }
  TextTable table(columns);
  for (const v1::Device& device : node.devices()) {
    std::vector<std::string> row = {
        absl::StrCat(device.index()),
        OrDash(device.name()),
        device.total_memory_bytes() > 0 ? BytesCell(device.total_memory_bytes()) : "-",
        BytesCell(device.memory_bytes()),
        BytesCell(device.memory_used_bytes()),
        OrDash(device.pci_bus_id())};
    if (device.telemetry_valid()) {
      row.push_back(absl::StrCat(device.sm_clock_mhz()));
      row.push_back(device.max_sm_clock_mhz() > 0 ? absl::StrCat(device.max_sm_clock_mhz()) : "-");
      row.push_back(absl::StrCat(device.mem_clock_mhz()));
      row.push_back(absl::StrCat(device.temperature_c()));
      row.push_back(absl::StrFormat("%.0f", device.power_w()));
      row.push_back(absl::StrCat(device.utilization_pct()));
      row.push_back(FormatClockLimits(device));
    } else if (telemetry && energy) {
      row.insert(row.end(), 7, "-");  // keeps the energy columns under their titles
    }
    if (energy) {
      row.push_back(device.energy_valid() ? absl::StrFormat("%.1f", device.energy_j() / 1e3) : "-");
      const bool nvlink = device.nvlink_traffic_valid();
      row.push_back(nvlink ? absl::StrFormat("%.1f", device.nvlink_tx_bytes() / 1e9) : "-");
      row.push_back(nvlink ? absl::StrFormat("%.1f", device.nvlink_rx_bytes() / 1e9) : "-");
    }
    table.AddRow(row);
  }
  if (node.devices_size() > 0) out += table.Render();
  return out + FormatDeviceHealth(node);
}

std::string TransportLabel(const v1::OpResult& op) {
  if (op.algorithm().empty()) return op.transport();
  return absl::StrCat(op.transport(), "/", op.algorithm());
}

std::string FormatClockLimits(const v1::Device& device) {
  if (!device.telemetry_valid() || !device.clock_limits_valid() || device.clock_limits().empty()) {
    return "-";
  }
  return absl::StrJoin(device.clock_limits(), ",");
}

void AddTelemetryJson(const v1::Device& d, nlohmann::json* out) {
  nlohmann::json& j = *out;
  // Health readings stand on their own validity, clock readings or not.
  if (HasHealth(d)) j["health"] = HealthJson(d);
  if (!d.telemetry_valid()) return;
  j["sm_clock_mhz"] = d.sm_clock_mhz();
  j["mem_clock_mhz"] = d.mem_clock_mhz();
  j["temperature_c"] = d.temperature_c();
  j["power_w"] = d.power_w();
  j["utilization_pct"] = d.utilization_pct();
  if (d.max_sm_clock_mhz() > 0) j["max_sm_clock_mhz"] = d.max_sm_clock_mhz();
  if (d.clock_limits_valid()) {
    j["clock_limits"] = std::vector<std::string>(d.clock_limits().begin(), d.clock_limits().end());
  }
  if (d.energy_valid()) j["energy_j"] = d.energy_j();
  if (d.nvlink_traffic_valid()) {
    j["nvlink_tx_bytes"] = d.nvlink_tx_bytes();
    j["nvlink_rx_bytes"] = d.nvlink_rx_bytes();
  }
  if (d.capped_time_valid()) {
    j["power_capped_s"] = d.power_capped_s();
    j["thermal_capped_s"] = d.thermal_capped_s();
  }
}

std::string FormatStats(const v1::GetStatsResponse& stats) {
  std::string out;
  absl::StrAppend(&out, "uptime:         ", FormatDuration(stats.uptime_s()), "\n");
  absl::StrAppend(&out, "jobs submitted: ", stats.jobs_submitted(), "\n");
  absl::StrAppend(&out, "jobs rejected:  ", stats.jobs_rejected(), "\n");
  // Known states first in lifecycle order, then anything else the daemon sends.
  std::map<std::string, int64_t> rest(stats.jobs_by_state().begin(), stats.jobs_by_state().end());
  std::vector<std::string> parts;
  for (v1::JobState state :
       {v1::QUEUED, v1::RUNNING, v1::SUCCEEDED, v1::FAILED, v1::CANCELLED, v1::ABORTED}) {
    const std::string name = JobStateName(state);
    auto it = rest.find(name);
    parts.push_back(absl::StrCat(name, " ", it == rest.end() ? 0 : it->second));
    if (it != rest.end()) rest.erase(it);
  }
  for (const auto& [name, count] : rest) parts.push_back(absl::StrCat(name, " ", count));
  absl::StrAppend(&out, "jobs by state:  ", absl::StrJoin(parts, ", "), "\n");
  TextTable table(Columns({Figures({"DEVICE", "JOBS", "BUSY_S"})}));
  for (const v1::DeviceStats& device : stats.devices()) {
    table.AddRow({absl::StrCat(device.device()), absl::StrCat(device.jobs_run()),
                  FormatSeconds(device.busy_ms() / 1000.0)});
  }
  if (stats.devices_size() > 0) out += table.Render();
  return out;
}

}  // namespace overlap::client
