#include "server/wire/job_wire.h"

#include <algorithm>
#include <utility>

#include "server/wire/report_wire.h"

namespace overlap::wire {
namespace {

// Every state a job can be in, in both forms.
constexpr std::pair<jobs::JobState, v1::JobState> kStates[] = {
    {jobs::JobState::kQueued, v1::QUEUED},       {jobs::JobState::kRunning, v1::RUNNING},
    {jobs::JobState::kSucceeded, v1::SUCCEEDED}, {jobs::JobState::kFailed, v1::FAILED},
    {jobs::JobState::kCancelled, v1::CANCELLED}, {jobs::JobState::kAborted, v1::ABORTED}};

}  // namespace

v1::JobState ToProto(jobs::JobState state) {
  for (const auto& [ours, theirs] : kStates) {
    if (ours == state) return theirs;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

jobs::JobState FromProto(v1::JobState state) {
  for (const auto& [ours, theirs] : kStates) {
    if (theirs == state) return ours;
  }
  return jobs::JobState::kQueued;
}

std::optional<jobs::JobState> StateFilter(v1::JobState state) {
  if (state == v1::JOB_STATE_UNSPECIFIED) return std::nullopt;
  return FromProto(state);
}

v1::JobState ToProto(const std::optional<jobs::JobState>& filter) {
  return filter ? ToProto(*filter) : v1::JOB_STATE_UNSPECIFIED;
}

v1::Job ToProto(const jobs::JobRecord& job) {
  v1::Job out;
  out.set_id(job.id);
  out.set_name(job.name);
  out.set_state(ToProto(job.state));
  out.set_priority(job.priority);
  for (int device : job.devices) out.add_devices(device);
  out.set_spec(job.spec);
  out.set_owner(job.owner);
  out.set_owner_name(job.owner_name);
  out.set_owner_admin(job.owner_admin);
  for (const std::string& node : job.nodes) out.add_nodes(node);
  out.set_coordinator(job.coordinator);
  out.set_global_job_id(job.global_job_id);
  out.set_node_index(job.node_index);
  out.set_counted_as_coordinated(job.counted_as_coordinated);
  out.set_error(job.error);
  out.set_submit_time_ms(job.submit_time_ms);
  out.set_start_time_ms(job.start_time_ms);
  out.set_end_time_ms(job.end_time_ms);
  if (job.progress) *out.mutable_progress() = ToProto(*job.progress);
  *out.mutable_result() = ToProto(job.result);
  out.set_sequence(job.sequence);
  out.set_error_code(static_cast<int32_t>(job.error_code));
  out.set_ops_finished(std::max(job.ops_finished, static_cast<int>(job.result.ops.size())));
  return out;
}

jobs::JobRecord FromProto(const v1::Job& job) {
  jobs::JobRecord out;
  out.sequence = job.sequence();
  out.id = job.id();
  out.name = job.name();
  out.priority = job.priority();
  out.devices.assign(job.devices().begin(), job.devices().end());
  out.spec = job.spec();
  out.owner = job.owner();
  out.owner_name = job.owner_name();
  out.owner_admin = job.owner_admin();
  out.nodes.assign(job.nodes().begin(), job.nodes().end());
  out.coordinator = job.coordinator();
  out.global_job_id = job.global_job_id();
  out.node_index = job.node_index();
  out.counted_as_coordinated = job.counted_as_coordinated();
  out.state = FromProto(job.state());
  out.submit_time_ms = job.submit_time_ms();
  out.start_time_ms = job.start_time_ms();
  out.end_time_ms = job.end_time_ms();
  out.error = job.error();
  out.error_code = static_cast<absl::StatusCode>(job.error_code());
  if (job.has_progress()) out.progress = FromProto(job.progress());
  out.result = FromProto(job.result());
  out.ops_finished = job.ops_finished();
  return out;
}

}  // namespace overlap::wire
