#include "server/wire/job_wire.h"

#include <algorithm>
#include <utility>

#include "server/wire/report_wire.h"
#include "server/wire/same_name_fields.h"

// clang-format off
#define JOB_FIELDS(F)                                                                 \
  F(sequence) F(id) F(name) F(priority) F(spec) F(owner) F(owner_name)                \
  F(owner_admin) F(coordinator) F(global_job_id) F(global_id) F(node_index)            \
  F(counted_as_coordinated) F(error) F(submit_time_ms) F(start_time_ms)               \
  F(end_time_ms) F(waiting)
// clang-format on

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

v1::Job ToProto(const jobs::JobRecord& in) {
  v1::Job out;
  JOB_FIELDS(WIRE_SET)
  out.set_state(ToProto(in.state));
  for (int device : in.devices) out.add_devices(device);
  for (const std::string& node : in.nodes) out.add_nodes(node);
  if (in.progress) *out.mutable_progress() = ToProto(*in.progress);
  *out.mutable_result() = ToProto(in.result);
  out.set_error_code(static_cast<int32_t>(in.error_code));
  out.set_ops_finished(std::max(in.ops_finished, static_cast<int>(in.result.ops.size())));
  out.set_priority_class(in.priority_class == PriorityClass::kDeferred ? v1::DEFERRED
                                                                       : v1::CRITICAL);
  return out;
}

jobs::JobRecord FromProto(const v1::Job& in) {
  jobs::JobRecord out;
  JOB_FIELDS(WIRE_GET)
  out.state = FromProto(in.state());
  out.devices.assign(in.devices().begin(), in.devices().end());
  out.nodes.assign(in.nodes().begin(), in.nodes().end());
  out.error_code = static_cast<absl::StatusCode>(in.error_code());
  if (in.has_progress()) out.progress = FromProto(in.progress());
  out.result = FromProto(in.result());
  out.ops_finished = in.ops_finished();
  out.priority_class =
      in.priority_class() == v1::DEFERRED ? PriorityClass::kDeferred : PriorityClass::kCritical;
  return out;
}

}  // namespace overlap::wire
