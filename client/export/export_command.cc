#include "client/export/export_command.h"

#include <fstream>
#include <limits>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/core/command_io.h"
#include "client/export/framework_export.h"
#include "common/graph_parser.h"

namespace overlap::client {

namespace {

// An op's choice and its step, without margins yet.
ExportChoice Chosen(const std::string& id, const std::string& type, const ops::Schedule& schedule,
                    double step_ms) {
  ExportChoice c;
  c.op_id = id;
  c.op_type = type;
  c.schedule = schedule;
  c.step_ms = step_ms;
  return c;
}

// The op's choice, with its margins from the candidates autotune timed.
std::optional<ExportChoice> ChoiceOf(const v1::OpResult& op) {
  absl::StatusOr<ops::Schedule> schedule = ops::ParseScheduleName(op.schedule());
  if (!schedule.ok()) return std::nullopt;
  ExportChoice c = Chosen(op.id(), op.type(), *schedule, op.step().median_ms());
  std::vector<CandidateFigures> candidates;
  for (const v1::CandidateTiming& t : op.candidates()) {
    absl::StatusOr<ops::Schedule> s = ops::ParseScheduleName(t.schedule());
    if (s.ok()) candidates.push_back(CandidateFigures{*s, t.best_ms(), t.runoff_ms()});
  }
  SetMargins(c, candidates);
  return c;
}

absl::StatusOr<std::vector<ExportChoice>> FromJob(DaemonClient& client, const std::string& id,
                                                  std::string* source) {
  absl::StatusOr<v1::Job> job = client.GetJob(id);
  if (!job.ok()) return job.status();
  if (job->state() != v1::SUCCEEDED) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " is ", v1::JobState_Name(job->state()),
                     ": only a job that succeeded has choices to export"));
  }
  std::vector<ExportChoice> out;
  for (const v1::OpResult& op : job->result().ops()) {
    absl::StatusOr<OpType> type = ParseOpType(op.type());
    if (type.ok() && IsGemmOnly(*type)) continue;  // a GEMM alone has nothing to overlap
    if (auto c = ChoiceOf(op)) out.push_back(*c);
  }
  *source = absl::StrCat("job ", id, " (", job->name(), ")");
  return out;
}

absl::StatusOr<std::vector<ExportChoice>> FromGraph(DaemonClient& client,
                                                    const ExportOptions& options,
                                                    std::string* source, std::ostream& err) {
  absl::StatusOr<std::string> text = ReadGraphFile(options.graph);
  if (!text.ok()) return text.status();
  absl::StatusOr<JobSpec> spec = ParseJobSpec(*text, options.graph);
  if (!spec.ok()) return spec.status();
  int devices = static_cast<int>(spec->devices.size());
  if (options.tp == 0 && devices == 0) {
    absl::StatusOr<v1::GetNodeInfoResponse> node = client.GetNodeInfo();
    if (!node.ok()) return node.status();
    devices = node->devices_size();
  }
  std::vector<ExportChoice> out;
  for (const OpSpec& op : spec->ops) {
    if (IsGemmOnly(op.type)) continue;
    const int tp = options.tp > 0 && op.group == OpGroup::kTp
                       ? options.tp
                       : GroupSize(spec->mesh, op.group, devices);
    v1::TuningFilter filter;
    filter.set_op_type(OpTypeName(op.type));
    filter.set_m(op.m);
    filter.set_k(op.k);
    filter.set_n(op.n);
    absl::StatusOr<v1::ListTunedSchedulesResponse> kept = client.ListTunedSchedules(filter);
    if (!kept.ok()) return kept.status();
    bool found = false;
    for (const v1::TunedSchedule& t : kept->schedules()) {
      if (t.tp() != tp || t.dtype() != DTypeName(spec->dtype) || !t.current()) continue;
      absl::StatusOr<ops::Schedule> s = ops::ParseScheduleName(t.schedule());
      if (!s.ok()) continue;
      out.push_back(Chosen(op.id, OpTypeName(op.type), *s, t.step_ms()));
      found = true;
      break;
    }
    if (!found) {
      err << "export: op " << op.id << ": no tuned choice kept at tp " << tp
          << " (run overlapctl bench --graph " << options.graph << ")\n";
    }
  }
  *source = absl::StrCat("the tuning cache, for ", options.graph);
  return out;
}

}  // namespace

int RunExport(DaemonClient& client, const ExportOptions& options, std::ostream& out,
              std::ostream& err) {
  if (options.format != "te" && options.format != "megatron" && options.format != "torchtitan") {
    err << "overlapctl: export --format: te, megatron or torchtitan, not '" << options.format
        << "'\n";
    return kExitUsage;
  }
  const bool torch_only = options.format == "torchtitan" && !options.bench.empty() &&
                          options.job.empty() && options.graph.empty();
  if (!torch_only && options.job.empty() == options.graph.empty()) {
    err << "overlapctl: export takes --job ID or --graph FILE (torchtitan: or --bench FILE)\n";
    return kExitUsage;
  }
  if (!options.bench.empty() && options.format != "torchtitan") {
    err << "overlapctl: export --bench: PyTorch's figures answer --format torchtitan only\n";
    return kExitUsage;
  }
  std::optional<TorchMeasurement> torch;
  if (!options.bench.empty()) {
    absl::StatusOr<std::string> text = ReadBoundedFile(options.bench, kMaxInputFileBytes);
    const nlohmann::json doc =
        nlohmann::json::parse(text.ok() ? *text : std::string(), nullptr, false);
    absl::StatusOr<TorchMeasurement> m =
        !text.ok() ? text.status()
        : !doc.is_discarded()
            ? TorchMeasurementFromJson(doc, options.bench)
            : absl::InvalidArgumentError(absl::StrCat("cannot read JSON from ", options.bench));
    if (!m.ok()) return UsageError(m.status(), err);
    torch = *m;
  }
  std::string source;
  absl::StatusOr<std::vector<ExportChoice>> choices =
      torch_only             ? absl::StatusOr<std::vector<ExportChoice>>(std::vector<ExportChoice>{})
      : options.job.empty() ? FromGraph(client, options, &source, err)
                            : FromJob(client, options.job, &source);
  if (!choices.ok()) {
    if (choices.status().code() == absl::StatusCode::kInvalidArgument ||
        (!options.graph.empty() && choices.status().code() == absl::StatusCode::kNotFound)) {
      err << "overlapctl: " << choices.status().message() << "\n";
      return kExitUsage;
    }
    return ReportCallError(choices.status(), client.address(), err);
  }
  std::string text;
  if (options.format == "te") {
    nlohmann::json j = TeExport(*choices);
    j["source"] = source;
    text = j.dump(1) + "\n";
  } else if (options.format == "megatron") {
    text = MegatronYaml(*choices, source);
  } else {
    text = TorchtitanToml(*choices, source, torch ? &*torch : nullptr);
  }
  if (!options.output.empty()) return WriteTextFile(options.output, text, err);
  out << text;
  return kExitOk;
}

}  // namespace overlap::client
