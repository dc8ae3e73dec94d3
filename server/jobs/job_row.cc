#include "server/jobs/job_row.h"

#include "absl/strings/str_cat.h"
#include "server/jobs/job_store.h"

namespace overlap::jobs {
namespace {

absl::Status Unreadable(uint64_t sequence) {
  return absl::DataLossError(absl::StrCat("job store: ", JobIdForSequence(sequence),
                                          " is unreadable (its stored data is damaged)"));
}

// ParseFromArray takes an int: a blob past 2 GiB cannot be one the store wrote.
template <typename Message>
bool Parse(absl::string_view blob, Message* message) {
  return blob.size() <= static_cast<size_t>(INT32_MAX) &&
         message->ParseFromArray(blob.data(), static_cast<int>(blob.size()));
}

absl::StatusOr<v1::Job> DecodeJob(absl::string_view blob, const JobRowColumns& row) {
  v1::Job job;
  if (!Parse(blob, &job)) return Unreadable(row.sequence);
  // Flipped bytes can turn a field into an unknown one, or one value into
  // another, and leave the rest parsing: the fields the row's columns repeat
  // are where such damage shows.
  if (job.sequence() != row.sequence || job.id() != JobIdForSequence(row.sequence) ||
      job.state() != row.state || job.state() == v1::JOB_STATE_UNSPECIFIED ||
      !v1::JobState_IsValid(job.state())) {
    return Unreadable(row.sequence);
  }
  return job;
}

}  // namespace

absl::StatusOr<v1::Job> DecodeJobRow(absl::string_view blob, const JobRowColumns& row) {
  return DecodeJob(blob, row);
}

absl::StatusOr<v1::Job> DecodeSummaryRow(absl::string_view blob, const JobRowColumns& row) {
  // A summary adds one field of its own to the job's (ops_finished, a varint).
  constexpr int64_t kSummaryOnlyBytes = 16;
  if (row.job_bytes >= 0 && row.job_bytes + kSummaryOnlyBytes < static_cast<int64_t>(blob.size())) {
    return Unreadable(row.sequence);
  }
  return DecodeJob(blob, row);
}

absl::StatusOr<v1::JobResult> DecodeOpResultRow(absl::string_view blob, uint64_t sequence) {
  v1::JobResult row;
  if (!Parse(blob, &row) || row.ops_size() != 1) {
    return absl::DataLossError(absl::StrCat("job store: an op result of ",
                                            JobIdForSequence(sequence), " is unreadable"));
  }
  return row;
}

}  // namespace overlap::jobs
