#include "server/jobs/job_record.h"

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

}  // namespace overlap::jobs
