#include "server/jobs/job_record.h"

#include "server/report/result_proto.h"

namespace overlap::jobs {

bool IsFinal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled || state == JobState::kAborted;
}

v1::JobState ToProto(JobState state) {
  switch (state) {
    case JobState::kQueued:
      return v1::QUEUED;
    case JobState::kRunning:
      return v1::RUNNING;
    case JobState::kSucceeded:
      return v1::SUCCEEDED;
    case JobState::kFailed:
      return v1::FAILED;
    case JobState::kCancelled:
      return v1::CANCELLED;
    case JobState::kAborted:
      return v1::ABORTED;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

JobState FromProto(v1::JobState state) {
  switch (state) {
    case v1::RUNNING:
      return JobState::kRunning;
    case v1::SUCCEEDED:
      return JobState::kSucceeded;
    case v1::FAILED:
      return JobState::kFailed;
    case v1::CANCELLED:
      return JobState::kCancelled;
    case v1::ABORTED:
      return JobState::kAborted;
    default:
      return JobState::kQueued;
  }
}

v1::Job ToProto(const JobRecord& job) {
  v1::Job out;
  out.set_id(job.id);
  out.set_name(job.name);
  out.set_state(ToProto(job.state));
  out.set_priority(job.priority);
  for (int device : job.devices) out.add_devices(device);
  out.set_spec(job.spec);
  out.set_owner(job.owner);
  out.set_owner_name(job.owner_name);
  for (const std::string& node : job.nodes) out.add_nodes(node);
  out.set_coordinator(job.coordinator);
  out.set_global_job_id(job.global_job_id);
  out.set_node_index(job.node_index);
  out.set_counted_as_coordinated(job.counted_as_coordinated);
  out.set_error(job.error);
  out.set_submit_time_ms(job.submit_time_ms);
  out.set_start_time_ms(job.start_time_ms);
  out.set_end_time_ms(job.end_time_ms);
  if (job.progress) *out.mutable_progress() = report::ToProto(*job.progress);
  *out.mutable_result() = job.result;
  out.set_sequence(job.sequence);
  out.set_error_code(static_cast<int32_t>(job.error_code));
  out.set_ops_finished(job.result.ops_size());
  return out;
}

JobRecord FromProto(const v1::Job& job) {
  JobRecord out;
  out.sequence = job.sequence();
  out.id = job.id();
  out.name = job.name();
  out.priority = job.priority();
  out.devices.assign(job.devices().begin(), job.devices().end());
  out.spec = job.spec();
  out.owner = job.owner();
  out.owner_name = job.owner_name();
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
  if (job.has_progress()) {
    const v1::Progress& p = job.progress();
    out.progress = runner::Progress{p.op_index(), p.op_count(), p.op_id(),
                                    p.phase(),    p.iteration(), p.iterations()};
  }
  out.result = job.result();
  return out;
}

}  // namespace overlap::jobs
