#include "server/jobs/admission.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/planner/cost_model.h"
#include "common/config.h"
#include "common/graph_parser.h"
#include "common/overlap_pass.h"
#include "common/status_macros.h"
#include "common/text.h"
#include "server/runner/job_runner.h"

namespace overlap::jobs {
namespace {

double GiB(int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(1LL << 30); }

// The config key that sizes what jobs may use of a device of `backend`.
std::string PoolSetting(const std::string& backend) {
  return backend == "host" ? "host_device_memory_bytes" : "pool_bytes_per_device";
}

}  // namespace

absl::Status CheckCrossNodeSchedules(const JobSpec& spec, int world, int devices_per_node) {
  for (const OpSpec& op : spec.ops) {
    if (!GroupsCrossNodes(spec.mesh, op.group, world, devices_per_node)) continue;
    if (op.transport == Transport::kP2p || op.transport == Transport::kDirect) {
      return absl::InvalidArgumentError(absl::StrCat(
          "op ", op.id, ": transport ", TransportName(op.transport),
          " needs the peer's memory, and this op's group spans daemons: use nccl (or auto)"));
    }
    if (op.mode == OverlapMode::kRing) {
      return absl::InvalidArgumentError(absl::StrCat(
          "op ", op.id, ": mode ring sends point to point, and this op's group spans daemons: "
          "use chunked, bulk or serial (or auto)"));
    }
  }
  return absl::OkStatus();
}

std::string DoesNotFitMessage(int64_t needed, const engine::DeviceInfo& device,
                              const std::string& pool_setting) {
  std::string message =
      absl::StrFormat("job needs %.2f GiB per device, device %d has %.2f GiB (%s)", GiB(needed),
                      device.index, GiB(device.memory_bytes), pool_setting);
  const int64_t total = device.total_memory_bytes;
  if (total <= device.memory_bytes) return message;  // the pool is the whole device
  // The pool takes at most kPoolMaxPercentOfFree of what is free when the daemon
  // starts (DevicePool::Create), and the GPU's runtime holds some of the rest.
  if (needed <= total / 100 * kPoolMaxPercentOfFree) {
    absl::StrAppendFormat(&message,
                          " of its %.2f GiB: a larger %s in the daemon's config fits it (a "
                          "size, or a share such as 80%%; at most %d%% of the GPU)",
                          GiB(total), pool_setting, kPoolMaxPercentOfFree);
  } else {
    absl::StrAppendFormat(&message,
                          " and %.2f GiB in all: spread the job over more GPUs (a larger tp) "
                          "or make its shapes smaller",
                          GiB(total));
  }
  return message;
}

namespace {

// How long a parse waits for room in the budget: longer than the largest
// spec takes to parse, short enough that a flood is answered, not queued.
constexpr absl::Duration kParseBudgetWait = absl::Seconds(3);

}  // namespace

Admission::Admission(const engine::Engine& engine, AdmissionOptions options)
    : engine_(engine),
      options_(std::move(options)),
      parse_budget_(std::make_unique<ParseBudget>(
          options_.parse_budget_bytes > 0 ? options_.parse_budget_bytes
                                          : ParseBudget::CapacityFor(options_.max_spec_bytes),
          kParseBudgetWait)) {}

ValidationLimits Admission::Limits() const {
  ValidationLimits limits;
  limits.device_count = engine_.DeviceCount();
  limits.library_algorithms = engine_.LibraryAlgorithms();
  limits.max_iterations = options_.max_iterations;
  limits.max_ops = options_.max_ops_per_job;
  return limits;
}

absl::Status Admission::CheckText(const std::string& spec_text,
                                  const std::string& source_name) const {
  if (static_cast<int64_t>(spec_text.size()) > options_.max_spec_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("spec: ", spec_text.size(),
                                                   " bytes is over max_spec_bytes (",
                                                   options_.max_spec_bytes, ")"));
  }
  if (std::optional<size_t> bad = FirstInvalidUtf8(spec_text)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%sspec: not UTF-8 text (byte 0x%02x at offset %d): a graph is a YAML or JSON file",
        source_name.empty() ? "" : source_name + ": ",
        static_cast<unsigned char>(spec_text[*bad]), *bad));
  }
  return absl::OkStatus();
}

runner::JobBytes Admission::BytesPerDevice(const JobSpec& spec, int tp) const {
  if (!options_.bytes_per_device) return runner::JobBytesOf(spec, tp);
  const int64_t bytes = options_.bytes_per_device(spec, tp);
  return runner::JobBytes{bytes, bytes};
}

absl::StatusOr<int64_t> Admission::CheckFits(const JobSpec& spec, int tp,
                                             const std::vector<int>& devices) const {
  // Refused only where it cannot run at all: a layer step that does not fit
  // is skipped, the ops still run one after another.
  const runner::JobBytes bytes = BytesPerDevice(spec, tp);
  const int64_t needed = bytes.required;
  for (int device : devices) {
    const engine::DeviceInfo info = engine_.GetDeviceInfo(device);
    if (needed > info.memory_bytes) {
      return absl::ResourceExhaustedError(
          DoesNotFitMessage(needed, info, PoolSetting(engine_.Name())));
    }
  }
  return bytes.peak;
}

namespace {

// The graph the job runs: `spec` (validated) after the overlap pass, which
// gives a valid graph from a valid one; INTERNAL names the pass otherwise.
absl::StatusOr<JobSpec> Fused(JobSpec spec, const ValidationLimits& limits) {
  JobSpec fused = FuseCollectives(std::move(spec));
  if (absl::Status valid = ValidateJobSpec(fused, limits).status(); !valid.ok()) {
    return absl::InternalError(
        absl::StrCat("the overlap pass rewrote the graph into one that is not valid: ",
                     valid.message(), " (fuse: false runs it as written)"));
  }
  return fused;
}

}  // namespace

absl::StatusOr<JobSpec> Admission::Parse(const std::string& spec_text,
                                         const std::string& raw_source_name) const {
  // Only for messages: printable, and short.
  const std::string source_name = Excerpt(raw_source_name, 120);
  RETURN_IF_ERROR(CheckText(spec_text, source_name));
  return ParseJobSpec(spec_text, source_name, parse_budget_.get());
}

absl::StatusOr<GraphPtr> Admission::AdmitSpan(JobSpec spec, const std::vector<std::string>& nodes,
                                              const ops::DecidedSchedules* decided,
                                              const ops::DecisionNotes* notes) const {
  if (!nodes.empty()) spec.nodes = nodes;
  if (spec.nodes.empty()) {
    return absl::InvalidArgumentError("nodes: a job spanning daemons needs at least one node");
  }
  // This node's devices, as every node brings them.
  auto graph = std::make_shared<AdmittedGraph>();
  ASSIGN_OR_RETURN(graph->devices, ResolveDevices(spec, Limits()));
  graph->world = static_cast<int>(spec.nodes.size() * graph->devices.size());
  // The graph over the whole mesh: global devices 0..world-1, node-major.
  JobSpec whole = spec;
  whole.devices.clear();
  ValidationLimits limits = Limits();
  limits.device_count = graph->world;
  ASSIGN_OR_RETURN(const std::vector<int> global, ValidateJobSpec(whole, limits));
  ASSIGN_OR_RETURN(whole, Fused(std::move(whole), limits));
  spec.ops = whole.ops;
  spec.fusions = whole.fusions;
  RETURN_IF_ERROR(CheckCrossNodeSchedules(whole, graph->world,
                                          static_cast<int>(graph->devices.size())));
  ASSIGN_OR_RETURN(graph->bytes_per_device,
                   CheckFits(whole, static_cast<int>(global.size()), graph->devices));
  const bool library_algorithms = engine_.LibraryAlgorithms();
  if (decided == nullptr) {
    const int per_node = static_cast<int>(graph->devices.size());
    std::optional<planner::Calibration> calibration;
    if (options_.calibration) calibration = options_.calibration(per_node);
    std::optional<planner::CostModel> model;
    if (calibration) model.emplace(*calibration, planner::WhatIf{});
    const ops::SpanningPlanner planner{model ? &*model : nullptr, per_node};
    ASSIGN_OR_RETURN(graph->schedules,
                     ops::DecideSpanningSchedules(whole, graph->world, library_algorithms,
                                                  &planner, &graph->schedule_notes));
  } else {
    RETURN_IF_ERROR(
        ops::CheckDecidedSchedules(whole, graph->world, library_algorithms, *decided));
    graph->schedules = *decided;
    if (notes != nullptr) graph->schedule_notes = *notes;
  }
  graph->spec = std::move(spec);
  return graph;
}

absl::StatusOr<AdmittedJob> Admission::Admit(JobSpec spec, const std::string& spec_text,
                                             const std::string& raw_source_name) const {
  if (!spec.nodes.empty()) {
    return absl::FailedPreconditionError(
        "nodes: the graph spans daemons, and this daemon coordinates no such jobs: give it "
        "peer_listen and peers in its config (docs/OPERATIONS.md, \"Cluster\")");
  }
  auto graph = std::make_shared<AdmittedGraph>();
  ASSIGN_OR_RETURN(graph->devices, ValidateJobSpec(spec, Limits()));
  ASSIGN_OR_RETURN(spec, Fused(std::move(spec), Limits()));
  ASSIGN_OR_RETURN(graph->bytes_per_device,
                   CheckFits(spec, static_cast<int>(graph->devices.size()), graph->devices));
  AdmittedJob admitted;
  admitted.job.name = !spec.name.empty() ? spec.name : Excerpt(raw_source_name, 120);
  admitted.job.priority = spec.priority;
  admitted.job.priority_class = spec.priority_class;
  admitted.job.devices = graph->devices;
  admitted.job.spec = spec_text;
  // As Revalidate would give it back from the stored job.
  spec.devices = graph->devices;
  graph->spec = std::move(spec);
  admitted.graph = std::move(graph);
  return admitted;
}

absl::StatusOr<GraphPtr> Admission::Revalidate(const JobRecord& job) const {
  ASSIGN_OR_RETURN(JobSpec spec, ParseJobSpec(job.spec, job.id, parse_budget_.get()));
  spec.devices = job.devices;
  absl::StatusOr<std::vector<int>> devices = ValidateJobSpec(spec, Limits());
  if (!devices.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no longer valid on this node: ", devices.status().message()));
  }
  auto graph = std::make_shared<AdmittedGraph>();
  ASSIGN_OR_RETURN(graph->spec, Fused(std::move(spec), Limits()));
  graph->devices = std::move(*devices);
  graph->bytes_per_device =
      BytesPerDevice(graph->spec, static_cast<int>(graph->devices.size())).peak;
  return graph;
}

}  // namespace overlap::jobs
