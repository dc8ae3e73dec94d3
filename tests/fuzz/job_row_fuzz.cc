// Fuzz target: the job store's rows as read back from disk
// (server/jobs/job_row.h). The first byte is the row's sequence column, the
// second its state column; the rest is the blob, decoded as a `jobs` row, a
// `summaries` row and an `op_results` row.
//
// Rules: any blob comes back as the row's own job or DATA_LOSS, never as
// another job: a job decoded has the row's id, sequence and state, and it
// survives what the store does with a row (server/wire's JobRecord and back)
// and a list (JobSummary). An op result decoded holds exactly one op.
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "server/jobs/job_record.h"
#include "server/jobs/job_row.h"
#include "server/jobs/job_store.h"
#include "server/wire/job_wire.h"
#include "tests/fuzz/fuzz_check.h"

namespace overlap::fuzz {
namespace {

void CheckJob(const absl::StatusOr<v1::Job>& job, const jobs::JobRowColumns& row) {
  if (!job.ok()) {
    FUZZ_CHECK(absl::IsDataLoss(job.status()));
    return;
  }
  FUZZ_CHECK(job->sequence() == row.sequence);
  FUZZ_CHECK(job->id() == jobs::JobIdForSequence(row.sequence));
  FUZZ_CHECK(job->state() == row.state && job->state() != v1::JOB_STATE_UNSPECIFIED);
  const v1::Job back = wire::ToProto(wire::FromProto(*job));
  FUZZ_CHECK(back.id() == job->id() && back.state() == job->state() &&
             back.sequence() == job->sequence() && back.spec() == job->spec());
  const v1::Job summary = wire::ToProto(jobs::JobSummary(wire::FromProto(*job)));
  FUZZ_CHECK(summary.id() == job->id() && summary.spec().empty());
}

}  // namespace
}  // namespace overlap::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace overlap;
  // Protobuf logs each string field that is not UTF-8 (and refuses the parse).
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
  if (size < 2) return 0;
  const jobs::JobRowColumns row{data[0], data[1] % 8};
  const absl::string_view blob(reinterpret_cast<const char*>(data + 2), size - 2);
  fuzz::CheckJob(jobs::DecodeJobRow(blob, row), row);
  fuzz::CheckJob(jobs::DecodeSummaryRow(blob, row), row);
  const absl::StatusOr<v1::JobResult> result = jobs::DecodeOpResultRow(blob, row.sequence);
  if (result.ok()) {
    FUZZ_CHECK(result->ops_size() == 1);
  } else {
    FUZZ_CHECK(absl::IsDataLoss(result.status()));
  }
  return 0;
}
