#include "server/jobs/job_record.h"

#include "absl/strings/str_cat.h"

namespace overlap::jobs {

bool IsFinal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled || state == JobState::kAborted;
}

const char* JobStateName(JobState state) {
  static constexpr const char* kNames[] = {"QUEUED", "RUNNING",   "SUCCEEDED",
                                           "FAILED", "CANCELLED", "ABORTED"};
  return kNames[static_cast<int>(state)];
}

std::string GlobalIdOf(const JobRecord& job, const std::string& node_name) {
  if (!job.global_id.empty()) return job.global_id;
  if (job.nodes.empty()) return "";
  if (!job.coordinator.empty()) return absl::StrCat(job.coordinator, "/", job.global_job_id);
  return absl::StrCat(node_name, "/", job.id);
}

bool SplitGlobalId(const std::string& id, std::string* node, std::string* job_id) {
  const size_t slash = id.rfind('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == id.size()) return false;
  *node = id.substr(0, slash);
  *job_id = id.substr(slash + 1);
  return true;
}

}  // namespace overlap::jobs
