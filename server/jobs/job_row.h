// What the job store reads back from its rows, decoded in one place. SQLite
// keeps a row's bytes, not their meaning: a blob that a bad disk, a crash of
// something else writing the file, or a hand edit changed may still parse as a
// protobuf (an unknown field, a shorter string), and would come back as some
// other job. So a decoded row must also be the row's own job: its id,
// sequence and state those its row's columns give (the store writes both from
// the same job). Anything else is DATA_LOSS naming the job, never a job.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "overlap/v1/overlap.pb.h"

namespace overlap::jobs {

// The columns of a `jobs` row that its blob repeats.
struct JobRowColumns {
  uint64_t sequence = 0;
  int state = 0;  // a v1::JobState
  // The length of the row's `job` blob where a list read it beside the
  // summary (SQLite gives it without reading the blob); -1: not read.
  int64_t job_bytes = -1;
};

// A `jobs` row's `job` blob. DATA_LOSS "job store: job-NNNNNN is unreadable
// (its stored data is damaged)" when it does not parse, or parses to a job
// whose sequence, id (JobIdForSequence) or state is not the row's, or whose
// state is none a job can be in (JOB_STATE_UNSPECIFIED or unknown).
absl::StatusOr<v1::Job> DecodeJobRow(absl::string_view blob, const JobRowColumns& row);

// A `summaries` row (JobSummary of the job) beside its `jobs` row's columns:
// the same checks and error; and, where `row.job_bytes` is known, a job blob
// too short to hold the summary's fields (they are a subset of the job's) is
// the job's damage too, so that a list does not show as ordinary a job whose
// blob was truncated or replaced while its summary survived.
absl::StatusOr<v1::Job> DecodeSummaryRow(absl::string_view blob, const JobRowColumns& row);

// An `op_results` row of job `sequence` (PutOpResult: the result's totals and
// exactly one op). DATA_LOSS "job store: an op result of job-NNNNNN is
// unreadable" when it does not parse or holds no op or more than one.
absl::StatusOr<v1::JobResult> DecodeOpResultRow(absl::string_view blob, uint64_t sequence);

}  // namespace overlap::jobs
