// Admission: whether a layer graph may run on this node, decided in one place
// before the job queue stores it: its size, that it is UTF-8 text, that it
// parses and validates against this node's devices and limits, and that its
// largest op fits every device's memory. What it admits is a typed graph
// (admitted_graph.h) that the job carries to its run. A job queued before a
// restart is checked again when it is about to run (Revalidate): it may meet
// another backend or config.
//
// Thread safety: const methods may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/graph.h"
#include "common/graph_validator.h"
#include "common/parse_budget.h"
#include "common/planner/calibration.h"
#include "server/engine/engine.h"
#include "server/jobs/admitted_graph.h"
#include "server/jobs/job_record.h"
#include "server/runner/job_runner.h"

namespace overlap::jobs {

struct AdmissionOptions {
  int max_iterations = 10000;
  int64_t max_spec_bytes = 1 << 20;
  int max_ops_per_job = 4096;
  // What the specs parsed at once may take together (ParseBudget); 0 sizes
  // it from max_spec_bytes (ParseBudget::CapacityFor).
  int64_t parse_budget_bytes = 0;
  // Bytes per device a job needs, at least and at most; null =
  // runner::JobBytesOf.
  std::function<int64_t(const JobSpec& spec, int tp)> bytes_per_device;
  // The node's kept calibration for `ranks` ranks (the planner's), for a
  // coordinator to decide a job spanning daemons with; null or nullopt: the
  // fixed rule decides.
  std::function<std::optional<planner::Calibration>(int ranks)> calibration;
};

// A job ready for the job queue: the job as stored (name, priority, devices,
// the spec's text) and its typed graph.
struct AdmittedJob {
  JobRecord job;
  GraphPtr graph;
};

// INVALID_ARGUMENT for an op whose groups cross nodes (ranks node-major,
// `devices_per_node` each) and that asks for a schedule needing the peer's
// memory (p2p, direct) or point-to-point sends (ring).
absl::Status CheckCrossNodeSchedules(const JobSpec& spec, int world, int devices_per_node);

class Admission {
 public:
  // `engine` must outlive the admission.
  Admission(const engine::Engine& engine, AdmissionOptions options);

  // The spec's text checked (its size, that it is UTF-8) and parsed: the one
  // parse of a job's graph on its way in. INVALID_ARGUMENT naming the field or
  // file for a spec that is too big, not UTF-8 or malformed; RESOURCE_EXHAUSTED
  // when the parses running at once leave no room in the parse budget in time.
  // Every parse of this admission (the user socket's, `validate`'s, the peer
  // port's) shares that one budget.
  absl::StatusOr<JobSpec> Parse(const std::string& spec_text, const std::string& source_name) const;

  // A local job from its parsed spec, validated against this node's devices
  // and limits. INVALID_ARGUMENT naming the field for a graph invalid here;
  // RESOURCE_EXHAUSTED when it does not fit a device's memory
  // (DoesNotFitMessage); FAILED_PRECONDITION for a graph with nodes (only a
  // daemon with peers runs one, through AdmitSpan).
  absl::StatusOr<AdmittedJob> Admit(JobSpec spec, const std::string& spec_text,
                                    const std::string& source_name) const;

  // A job spanning `nodes` (or the graph's own nodes: when empty), checked as
  // Admit checks a job, over the whole mesh: the graph validated on nodes x
  // this node's devices, its cross-node ops' schedules (CheckCrossNodeSchedules),
  // and its largest op against this node's memory. Every op's schedule is
  // decided there: on the coordinator (`decided` null) by the rule for jobs
  // spanning daemons; on a part, `decided` is its coordinator's decisions,
  // checked (ops::CheckDecidedSchedules) and kept.
  absl::StatusOr<GraphPtr> AdmitSpan(JobSpec spec, const std::vector<std::string>& nodes,
                                     const ops::DecidedSchedules* decided = nullptr,
                                     const ops::DecisionNotes* notes = nullptr) const;

  // A stored job queued before a restart: its text parsed and validated again
  // on its stored devices (the backend or config may have changed).
  // INVALID_ARGUMENT "no longer valid on this node: ..." when it does not.
  absl::StatusOr<GraphPtr> Revalidate(const JobRecord& job) const;

 private:
  ValidationLimits Limits() const;
  absl::Status CheckText(const std::string& spec_text, const std::string& source_name) const;
  // The bytes the job allocates at most on each of `devices` (with `tp`
  // ranks: runner::JobBytes::peak), once what it needs at least fits every
  // device's pool; RESOURCE_EXHAUSTED otherwise.
  absl::StatusOr<int64_t> CheckFits(const JobSpec& spec, int tp,
                                    const std::vector<int>& devices) const;
  runner::JobBytes BytesPerDevice(const JobSpec& spec, int tp) const;

  const engine::Engine& engine_;
  const AdmissionOptions options_;
  // Shared by every Parse; thread-safe, so a const Admission may use it.
  const std::unique_ptr<ParseBudget> parse_budget_;
};

// RESOURCE_EXHAUSTED's message for a job that needs `needed` bytes on each of
// its devices where `device`'s pool (sized by the config key `pool_setting`)
// holds less: says what would make it fit, a larger pool where the GPU has the
// room, more GPUs or smaller shapes where it does not.
std::string DoesNotFitMessage(int64_t needed, const engine::DeviceInfo& device,
                              const std::string& pool_setting);

}  // namespace overlap::jobs
