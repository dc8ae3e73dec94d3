#include "client/measure/grad_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/core/command_io.h"
#include "client/format/report.h"
#include "client/format/table.h"
#include "client/format/timeline.h"
#include "client/jobs/progress_printer.h"
#include "client/measure/commbench.h"
#include "common/byte_size.h"
#include "common/enum_names.h"
#include "common/graph_parser.h"
#include "common/library_env.h"
#include "common/status_macros.h"

namespace overlap::client {

namespace {

// A bucket's rows, as the daemon pads them (server/runner/layer_step.cc).
constexpr int64_t kBucketRowElements = 1024;

int64_t AllReduceElementBytes(const std::string& dtype) {
  const absl::StatusOr<DType> parsed = ParseDType(dtype);
  return parsed.ok() ? static_cast<int64_t>(DTypeSize(*parsed)) : 2;
}

struct GradShape {
  std::string id;
  int64_t m = 0, n = 0;
};

std::vector<GradShape> GradShapes(const GradBenchOptions& o) {
  const int dp = static_cast<int>(o.nodes.size());
  std::vector<GradShape> shapes;
  for (size_t i = 0; i < o.grad_bytes.size(); ++i) {
    const CollectiveShape s =
        CollectiveShapeFor(o.grad_bytes[i], AllReduceElementBytes(o.dtype), dp);
    shapes.push_back({absl::StrCat("grad", i), s.m, s.n});
  }
  return shapes;
}

const GradShape* FindGrad(const std::vector<GradShape>& shapes, absl::string_view id) {
  for (const GradShape& g : shapes) {
    if (g.id == id) return &g;
  }
  return nullptr;
}

int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

std::string MessageId(const GradMessage& m) { return absl::StrCat("msg-", m.m, "x", m.n); }

std::string GradSpecHeader(const GradBenchOptions& o, const std::string& name, int tp) {
  std::string spec = absl::StrFormat(
      "name: %s\nmesh: {tp: %d, dp: %d}\ndtype: %s\niterations: %d\nwarmup: %d\nverify: %s\n"
      "seed: %d\n",
      name, tp, o.nodes.size(), o.dtype, o.iterations, o.warmup, o.verify ? "true" : "false",
      o.seed);
  if (!o.devices.empty()) {
    absl::StrAppend(&spec, "devices: [", absl::StrJoin(o.devices, ", "), "]\n");
  }
  return spec;
}

}  // namespace

std::string GradFormName(GradForm form) {
  static constexpr EnumName<GradForm> kNames[] = {{GradForm::kWhole, "whole"},
                                                  {GradForm::kBucketed, "bucketed"},
                                                  {GradForm::kChunked, "chunked"},
                                                  {GradForm::kDynamic, "dynamic"}};
  return NameOf(kNames, form);
}

std::vector<int64_t> DefaultGradSizes(const std::string& backend) {
  if (backend == "host") return {int64_t{256} << 10, int64_t{1} << 20, int64_t{4} << 20};
  return {int64_t{1} << 20, int64_t{4} << 20, int64_t{16} << 20, int64_t{64} << 20};
}

BenchShape DefaultGradGemm(const std::string& backend) {
  const int64_t d = backend == "host" ? 8192 / kHostBenchShapeDivisor : 8192;
  return {"gemm", d, d, d};
}

absl::StatusOr<std::vector<int64_t>> ParseGradSizes(const std::string& text) {
  std::vector<int64_t> sizes;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    absl::StatusOr<int64_t> bytes = ParseByteSize(item);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--grad-sizes: \"", item, "\": ", bytes.status().message()));
    }
    sizes.push_back(*bytes);
  }
  if (sizes.empty()) return absl::InvalidArgumentError("--grad-sizes: none given");
  return sizes;
}

absl::Status ValidateGradBenchOptions(const GradBenchOptions& o) {
  if (o.nodes.size() < 2) {
    return absl::InvalidArgumentError(
        "--peers: give at least two daemons (their peer addresses, this one's among them)");
  }
  for (int64_t b : o.grad_bytes) {
    if (b <= 0) return absl::InvalidArgumentError("--grad-sizes: each must be above 0");
  }
  if (o.gemm.m != 0 && (o.gemm.m < 0 || o.gemm.k <= 0 || o.gemm.n <= 0)) {
    return absl::InvalidArgumentError("--gemm: m, k and n must be above 0");
  }
  if (o.gemms_per_grad < 1) {
    return absl::InvalidArgumentError("--gemms-per-grad: must be at least 1");
  }
  if (o.bucket_mib < 1) return absl::InvalidArgumentError("--bucket-mib: must be at least 1");
  if (o.chunk_kib < 1) return absl::InvalidArgumentError("--chunk-kib: must be at least 1");
  if (o.iterations < 1 || o.warmup < 0) {
    return absl::InvalidArgumentError("--iterations: at least 1, --warmup: at least 0");
  }
  const absl::StatusOr<DType> dtype = ParseDType(o.dtype);
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--dtype: unknown dtype \"", o.dtype, "\""));
  }
  if (*dtype == DType::kFP8) {
    return absl::InvalidArgumentError(
        "--dtype fp8: gradients are all-reduced in bf16 (an fp8 layer sums in bf16): use bf16");
  }
  return absl::OkStatus();
}

std::string BuildGradBenchSpec(const GradBenchOptions& o, GradForm form, int tp) {
  std::string spec = GradSpecHeader(o, absl::StrCat("gradbench-", GradFormName(form)), tp);
  const bool chunked = form == GradForm::kChunked || form == GradForm::kDynamic;
  absl::StrAppendFormat(&spec,
                        "layer_step: true\nbucket_mib: %d\nchunk_kib: %d\nscheduler: %s\nops:\n",
                        form == GradForm::kBucketed ? o.bucket_mib : 0, chunked ? o.chunk_kib : 0,
                        form == GradForm::kDynamic ? "dynamic" : "static");
  std::string last;  // the last GEMM: every op after it waits on it
  auto after = [&] { return last.empty() ? std::string() : absl::StrCat(", after: [", last, "]"); };
  auto gemms = [&](size_t block) {
    for (int j = 0; j < o.gemms_per_grad; ++j) {
      const std::string id = absl::StrCat("bwd", block, ".", j);
      absl::StrAppendFormat(&spec, "  - {id: %s, type: gemm, m: %d, k: %d, n: %d%s}\n", id,
                            o.gemm.m, o.gemm.k, o.gemm.n, after());
      last = id;
    }
  };
  const std::vector<GradShape> grads = GradShapes(o);
  for (size_t i = 0; i < grads.size(); ++i) {
    gemms(i);
    absl::StrAppendFormat(&spec,
                          "  - {id: %s, type: all_reduce, m: %d, n: %d, group: dp, mode: serial, "
                          "transport: nccl%s}\n",
                          grads[i].id, grads[i].m, grads[i].n, after());
  }
  gemms(grads.size());  // the rest of the backward, beside the last gradient
  return spec;
}

std::vector<GradMessage> GradMessages(const v1::Job& job, const GradBenchOptions& o) {
  const std::vector<GradShape> grads = GradShapes(o);
  const int64_t es = AllReduceElementBytes(o.dtype);
  const int64_t dp = static_cast<int64_t>(o.nodes.size());
  std::vector<GradMessage> out;
  for (const v1::LayerDeferral& d : job.result().layer_deferrals()) {
    GradMessage msg{d.op(), d.how(), std::max(1, d.pieces())};
    if (d.how() == "bucketed") {
      // bucket(grad0+grad1): its members' elements in rows, whole rows per rank.
      absl::string_view ids = d.op();
      absl::ConsumePrefix(&ids, "bucket(");
      absl::ConsumeSuffix(&ids, ")");
      int64_t elements = 0;
      for (absl::string_view id : absl::StrSplit(ids, '+')) {
        if (const GradShape* g = FindGrad(grads, id)) elements += g->m * g->n;
      }
      msg.n = kBucketRowElements;
      msg.m = RoundUp(
          std::max<int64_t>(1, RoundUp(elements, kBucketRowElements) / kBucketRowElements), dp);
    } else {
      const GradShape* g = FindGrad(grads, d.op());
      if (g == nullptr) continue;  // not one of ours
      msg.n = g->n;
      msg.m = g->m;
      if (d.how() == "chunked") {
        msg.m = RoundUp(std::max<int64_t>(1, d.piece_bytes() / (g->n * es)), dp);
      } else {
        msg.alone_ms = d.alone_ms();  // its own op's time alone
      }
    }
    out.push_back(msg);
  }
  return out;
}

std::string BuildGradMessagesSpec(const GradBenchOptions& o,
                                  const std::vector<GradMessage>& messages, int tp) {
  std::string ops;
  std::vector<std::string> seen;
  for (const GradMessage& m : messages) {
    if (m.how == "whole") continue;
    const std::string id = MessageId(m);
    if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
    seen.push_back(id);
    absl::StrAppendFormat(&ops,
                          "  - {id: %s, type: all_reduce, m: %d, n: %d, group: dp, mode: serial, "
                          "transport: nccl}\n",
                          id, m.m, m.n);
  }
  if (ops.empty()) return "";
  return absl::StrCat(GradSpecHeader(o, "gradbench-sent", tp), "layer_step: false\nops:\n", ops);
}

GradBenchRow FoldGradForm(GradForm form, const v1::Job& job, const v1::Job* messages_job,
                          const GradBenchOptions& o) {
  GradBenchRow row;
  row.form = form;
  row.job_id = job.id();
  const v1::JobResult& r = job.result();
  row.step_ms = r.layer_step().median_ms();
  row.without_ms = r.layer_step_without_deferred().median_ms();
  row.exposed_ms = std::max(0.0, row.step_ms - row.without_ms);
  row.hidden = r.layer_deferred_hidden_fraction();
  row.layer_note = r.layer_note();
  for (const v1::LayerDeferral& d : r.layer_deferrals()) row.whole_alone_ms += d.alone_ms();
  for (const v1::OpResult& op : r.ops()) row.verify.Add(op);
  std::map<std::string, const v1::OpResult*> timed;
  if (messages_job != nullptr) {
    for (const v1::OpResult& op : messages_job->result().ops()) timed[op.id()] = &op;
  }
  const int64_t es = AllReduceElementBytes(o.dtype);
  bool all_timed = true;
  for (GradMessage m : GradMessages(job, o)) {
    if (m.how != "whole") {
      auto it = timed.find(MessageId(m));
      if (it != timed.end()) {
        m.alone_ms = m.pieces * it->second->step().median_ms();
        row.verify.Add(*it->second);
      }
    }
    all_timed = all_timed && m.alone_ms > 0;
    row.sent_alone_ms += m.alone_ms;
    row.sent_bytes += static_cast<double>(m.pieces) * m.m * m.n * es;
    row.messages.push_back(m);
  }
  const double dp = static_cast<double>(o.nodes.size());
  if (all_timed && row.sent_alone_ms > 0) {
    row.algbw_gbps = row.sent_bytes / (row.sent_alone_ms * 1e6);
    row.busbw_gbps = row.algbw_gbps * 2 * (dp - 1) / dp;
  }
  return row;
}

namespace {

// "2 whole, 16 pieces of 256KiB", "1 bucket of 5.25MiB, 1 whole".
std::string SentAs(const GradBenchRow& row, int64_t es) {
  int whole = 0, buckets = 0, pieces = 0;
  int64_t bucket_bytes = 0, piece_bytes = 0;
  for (const GradMessage& m : row.messages) {
    if (m.how == "bucketed") {
      ++buckets;
      bucket_bytes = m.m * m.n * es;
    } else if (m.how == "chunked") {
      pieces += m.pieces;
      piece_bytes = m.m * m.n * es;
    } else {
      ++whole;
    }
  }
  std::vector<std::string> parts;
  if (buckets == 1) parts.push_back(absl::StrCat("1 bucket of ", FormatByteSize(bucket_bytes)));
  if (buckets > 1) parts.push_back(absl::StrCat(buckets, " buckets"));
  if (pieces > 0) {
    parts.push_back(absl::StrCat(pieces, " pieces of ", FormatByteSize(piece_bytes)));
  }
  if (whole > 0) parts.push_back(absl::StrCat(whole, " whole"));
  return parts.empty() ? "-" : absl::StrJoin(parts, ", ");
}

}  // namespace

std::string FormatGradBench(const std::vector<GradBenchRow>& rows, const v1::Job& first,
                            const GradBenchOptions& o, int tp) {
  const int dp = static_cast<int>(o.nodes.size());
  std::vector<std::string> sizes;
  int64_t total = 0;
  for (int64_t b : o.grad_bytes) {
    sizes.push_back(FormatByteSize(b));
    total += b;
  }
  std::string out = absl::StrFormat(
      "bench: gradient all-reduces across %d nodes x %d device(s) (mesh tp %d x dp %d), %s: "
      "%d gradient(s) a rank (%s: %s), each after %d GEMM(s) %d x %d x %d, as many after the "
      "last\n",
      dp, tp, tp, dp, o.dtype, o.grad_bytes.size(), absl::StrJoin(sizes, ", "),
      FormatByteSize(total), o.gemms_per_grad, o.gemm.m, o.gemm.k, o.gemm.n);
  TextTable t(Columns({Words({"FORM", "SENT_AS"}),
                       Figures({"STEP_MS", "NO_ARS_MS", "EXPOSED_MS", "ARS_ALONE_MS", "HIDDEN_%",
                                "ALGBW_GBPS", "BUSBW_GBPS", "MAX_REL_ERR"}),
                       Words({"VERIFY"})}));
  const int64_t es = AllReduceElementBytes(o.dtype);
  std::vector<std::string> notes;
  for (const GradBenchRow& r : rows) {
    const bool stepped = r.step_ms > 0;
    std::string form = GradFormName(r.form);
    if (r.form == GradForm::kBucketed) absl::StrAppend(&form, " ", o.bucket_mib, "MiB");
    if (r.form == GradForm::kChunked || r.form == GradForm::kDynamic) {
      absl::StrAppend(&form, " ", o.chunk_kib, "KiB");
    }
    t.AddRow({form, SentAs(r, es), stepped ? FormatMs(r.step_ms) : "-",
              stepped ? FormatMs(r.without_ms) : "-", stepped ? FormatMs(r.exposed_ms) : "-",
              r.sent_alone_ms > 0 ? FormatMs(r.sent_alone_ms) : "-",
              stepped ? FormatHidden(r.hidden) : "-",
              r.algbw_gbps > 0 ? FormatRate(r.algbw_gbps) : "-",
              r.busbw_gbps > 0 ? FormatRate(r.busbw_gbps) : "-", FormatRelError(r.verify),
              FormatVerify(r.verify)});
    if (!stepped && !r.layer_note.empty()) {
      notes.push_back(absl::StrCat(GradFormName(r.form), ": no layer step: ", r.layer_note));
    }
  }
  out += t.Render();
  absl::StrAppendFormat(
      &out,
      "step: the layer step (median); no ARs: it again without the all-reduces; exposed = step - "
      "no ARs; ARs alone: what the form sent (whole gradients, buckets, pieces), each timed "
      "alone; hidden %%: 1 - exposed / the gradients' whole all-reduces alone as the form's job "
      "timed them (one base for every form); busbw = algbw x 2(N-1)/N, N = %d, of what it sent "
      "alone\n",
      dp);
  for (const std::string& n : notes) absl::StrAppend(&out, n, "\n");
  out += FormatNodesLine(first.result());
  out += SharedGpuNote(first.result().ranks_per_gpu());
  out += HostFiguresNote(first.result().backend());
  return out;
}

nlohmann::json GradBenchJson(const v1::Job& first, const v1::GetNodeInfoResponse& node,
                             const v1::GetNodeInfoResponse* node_after,
                             const std::vector<GradBenchRow>& rows, const GradBenchOptions& o,
                             int tp) {
  nlohmann::json j = RunHeaderJson(first, node, node_after);
  AddNodesJson(first, node.backend(), &j);
  j["tp"] = tp;
  j["dtype"] = o.dtype;
  j["grad_bytes"] = o.grad_bytes;
  j["gemm"] = {{"m", o.gemm.m}, {"k", o.gemm.k}, {"n", o.gemm.n}};
  j["gemms_per_grad"] = o.gemms_per_grad;
  j["iterations"] = o.iterations;
  j["warmup"] = o.warmup;
  j["seed"] = o.seed;
  j["forms"] = nlohmann::json::array();
  const int64_t es = AllReduceElementBytes(o.dtype);
  for (const GradBenchRow& r : rows) {
    nlohmann::json messages = nlohmann::json::array();
    for (const GradMessage& m : r.messages) {
      messages.push_back({{"op", m.op},
                          {"how", m.how},
                          {"pieces", m.pieces},
                          {"m", m.m},
                          {"n", m.n},
                          {"bytes", m.pieces * m.m * m.n * es},
                          {"alone_ms", m.alone_ms}});
    }
    j["forms"].push_back(
        {{"form", GradFormName(r.form)},
         {"job_id", r.job_id},
         {"bucket_mib", r.form == GradForm::kBucketed ? o.bucket_mib : 0},
         {"chunk_kib",
          r.form == GradForm::kChunked || r.form == GradForm::kDynamic ? o.chunk_kib : 0},
         {"scheduler", r.form == GradForm::kDynamic ? "dynamic" : "static"},
         {"layer_step_ms", r.step_ms},
         {"without_all_reduces_ms", r.without_ms},
         {"exposed_ms", r.exposed_ms},
         {"hidden", r.hidden},
         {"whole_alone_ms", r.whole_alone_ms},
         {"sent_alone_ms", r.sent_alone_ms},
         {"sent_bytes", r.sent_bytes},
         {"algbw_gbps", r.algbw_gbps},
         {"busbw_gbps", r.busbw_gbps},
         {"verified", r.verify.verified},
         {"within_tolerance", r.verify.within},
         {"max_rel_error", r.verify.max_rel_error},
         {"layer_note", r.layer_note},
         {"messages", messages}});
  }
  return j;
}

int RunGradBench(DaemonClient& client, const GradBenchOptions& options,
                 const std::string& json_file, bool json, bool err_is_tty, std::ostream& out,
                 std::ostream& err) {
  if (absl::Status s = ValidateGradBenchOptions(options); !s.ok()) return UsageError(s, err);
  absl::StatusOr<v1::GetNodeInfoResponse> node = client.GetNodeInfo();
  if (!node.ok()) return ReportCallError(node.status(), client.address(), err);
  GradBenchOptions o = options;
  const bool host = node->backend() == "host";
  if (o.grad_bytes.empty()) o.grad_bytes = DefaultGradSizes(node->backend());
  if (o.gemm.m == 0) o.gemm = DefaultGradGemm(node->backend());
  if (host && (options.grad_bytes.empty() || options.gemm.m == 0)) {
    err << "bench: host backend: small gradients and GEMMs by default (--grad-sizes and --gemm "
           "set them)\n";
  }
  const int tp = o.devices.empty() ? node->devices_size() : static_cast<int>(o.devices.size());
  std::vector<v1::Job> jobs(4);
  const GradForm forms[] = {GradForm::kWhole, GradForm::kBucketed, GradForm::kChunked,
                            GradForm::kDynamic};
  for (GradForm form : forms) {
    if (int rc = SubmitAndFollow(client, BuildGradBenchSpec(o, form, tp),
                                 absl::StrCat("bench ", GradFormName(form)), tp, node->backend(),
                                 err_is_tty, err, &jobs[static_cast<int>(form)], o.nodes);
        rc != kExitOk) {
      return rc;
    }
  }
  // What the bucketed and chunked forms sent, timed alone.
  std::vector<GradMessage> sent = GradMessages(jobs[1], o);
  for (int form : {2, 3}) {
    for (const GradMessage& m : GradMessages(jobs[form], o)) sent.push_back(m);
  }
  v1::Job messages;
  const std::string messages_spec = BuildGradMessagesSpec(o, sent, tp);
  if (!messages_spec.empty()) {
    if (int rc = SubmitAndFollow(client, messages_spec, "bench sent alone", tp, node->backend(),
                                 err_is_tty, err, &messages, o.nodes);
        rc != kExitOk) {
      return rc;
    }
  }
  std::vector<GradBenchRow> rows;
  for (GradForm form : forms) {
    rows.push_back(FoldGradForm(form, jobs[static_cast<int>(form)],
                                messages_spec.empty() ? nullptr : &messages, o));
  }
  absl::StatusOr<v1::GetNodeInfoResponse> node_after = client.GetNodeInfo();
  const nlohmann::json j =
      GradBenchJson(jobs[0], *node, node_after.ok() ? &*node_after : nullptr, rows, o, tp);
  if (int rc = WriteJsonFile(j, json_file, err); rc != kExitOk) return rc;
  out << (json ? j.dump(1) + "\n" : FormatGradBench(rows, jobs[0], o, tp));
  return kExitOk;
}

}  // namespace overlap::client
