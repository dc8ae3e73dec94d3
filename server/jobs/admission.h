// Admission: whether a layer graph may run on this node, decided in one place
// before the scheduler stores it: its size, that it is UTF-8 text, that it
// parses and validates against this node's devices and limits, and that its
// largest op fits every device's memory. A job admitted earlier is checked
// again when it is about to run (Revalidate): one queued before a restart may
// meet another backend or config.
//
// Thread safety: const methods may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/graph.h"
#include "common/graph_validator.h"
#include "overlap/v1/overlap.pb.h"
#include "server/engine/engine.h"

namespace overlap::jobs {

struct AdmissionOptions {
  int max_iterations = 10000;
  int64_t max_spec_bytes = 1 << 20;
  int max_ops_per_job = 4096;
  // Bytes per device a job needs; null = runner::JobBytesPerDevice.
  std::function<int64_t(const JobSpec& spec, int tp)> bytes_per_device;
};

// A job that may run here, and what it runs.
struct AdmittedJob {
  JobSpec spec;
  std::vector<int> devices;  // the resolved group, rank order
};

// A job spanning daemons as one node admits it: the graph (its nodes
// replaced by those asked for, where given), this node's devices in rank
// order (every node brings the same `devices`), and the mesh's size.
struct AdmittedSpan {
  JobSpec spec;
  std::vector<int> local_devices;
  int world = 0;  // nodes x local devices; ranks node-major
};

// INVALID_ARGUMENT for an op whose groups cross nodes (ranks node-major,
// `devices_per_node` each) and that asks for a schedule needing the peer's
// memory (p2p, direct) or point-to-point sends (ring).
absl::Status CheckCrossNodeSchedules(const JobSpec& spec, int world, int devices_per_node);

class Admission {
 public:
  // `engine` must outlive the admission.
  Admission(const engine::Engine& engine, AdmissionOptions options);

  // The job to hand to the scheduler (name, priority, devices and the spec as
  // given). INVALID_ARGUMENT naming the field or file for a spec that is too
  // big, not UTF-8, malformed or invalid here; RESOURCE_EXHAUSTED when it does
  // not fit a device's memory (DoesNotFitMessage).
  absl::StatusOr<v1::Job> Admit(const std::string& spec_text, const std::string& source_name) const;

  // A stored job's spec parsed and validated again on its stored devices.
  // INVALID_ARGUMENT "no longer valid on this node: ..." when it does not.
  absl::StatusOr<AdmittedJob> Revalidate(const v1::Job& job) const;

  // A job spanning `nodes` (or the graph's own nodes: when empty), checked
  // as Admit checks a job, over the whole mesh: the graph validated on nodes x
  // this node's devices, its cross-node ops' schedules (CheckCrossNodeSchedules),
  // and its largest op against this node's memory. Admit itself refuses a
  // graph with nodes (FAILED_PRECONDITION): only a daemon with peers runs one.
  absl::StatusOr<AdmittedSpan> AdmitSpan(const std::string& spec_text,
                                         const std::string& source_name,
                                         const std::vector<std::string>& nodes) const;

 private:
  ValidationLimits Limits() const;
  absl::Status CheckText(const std::string& spec_text, const std::string& source_name) const;
  absl::Status CheckFits(const JobSpec& spec, int tp, const std::vector<int>& devices) const;

  const engine::Engine& engine_;
  const AdmissionOptions options_;
};

// RESOURCE_EXHAUSTED's message for a job that needs `needed` bytes on each of
// its devices where `device`'s pool (sized by the config key `pool_setting`)
// holds less: says what would make it fit, a larger pool where the GPU has the
// room, more GPUs or smaller shapes where it does not.
std::string DoesNotFitMessage(int64_t needed, const engine::DeviceInfo& device,
                              const std::string& pool_setting);

}  // namespace overlap::jobs
