// Fuzz target: `overlapctl pin` (client/jobs/pin.cc), which reads a finished job's
// stored graph text back and writes each op's schedule into it. The input is
// the stored spec; the job's results name the ops the spec declares (when it
// parses) and a few ids it may not, with schedules as a run reports them.
//
// Rules: any spec comes back as a Status (INVALID_ARGUMENT when it is no graph
// to pin), never an exception. For a UTF-8 spec (the daemon stores no other):
// the pinned graph is YAML again, and pinning a spec that parses gives a spec
// that parses, and where its op ids are ones the daemon stores (printable
// UTF-8), each op with a result carrying that result's mode and transport.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "client/jobs/pin.h"
#include "common/graph_parser.h"
#include "common/graph_validator.h"
#include "common/text.h"
#include "common/yaml_util.h"
#include "tests/fuzz/fuzz_check.h"

namespace overlap::fuzz {
namespace {

struct Ran {
  const char* mode;
  int chunks;
  const char* transport;
};
constexpr Ran kRuns[] = {{"chunked", 4, "p2p"}, {"ring", 2, "nccl"}, {"bulk", 1, "nccl"},
                         {"serial", 1, "nccl"}};

v1::Job StoredJob(const std::string& spec_text, const absl::StatusOr<JobSpec>& spec) {
  v1::Job job;
  job.set_id("job-000007");
  job.set_name("fuzz");
  job.set_state(v1::SUCCEEDED);
  job.set_spec(spec_text);
  job.mutable_result()->set_gpu("host");
  std::map<std::string, OpType> ids = {{"fc1", OpType::kAgGemm}, {"0", OpType::kGemmRs}};
  if (spec.ok()) {
    for (const OpSpec& op : spec->ops) ids[op.id] = op.type;
  }
  int i = 0;
  for (const auto& [id, type] : ids) {
    const Ran& ran = kRuns[i++ % 4];
    v1::OpResult* op = job.mutable_result()->add_ops();
    op->set_id(id);
    op->set_tp(2);
    op->set_mode(ran.mode);
    op->set_chunks(ran.chunks);
    op->set_transport(ran.transport);
    if (type == OpType::kAllReduce) op->set_algorithm("ring");
  }
  return job;
}

}  // namespace
}  // namespace overlap::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace overlap;
  const std::string text = fuzz::Text(data, size);
  const absl::StatusOr<JobSpec> spec = ParseJobSpec(text, "fuzz");
  const v1::Job job = fuzz::StoredJob(text, spec);
  const absl::StatusOr<std::string> pinned = client::PinnedGraph(job);
  if (!pinned.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(pinned.status()));
    FUZZ_CHECK(!spec.ok());
    return 0;
  }
  // The daemon stores only UTF-8 graphs (Admission); yaml-cpp writes other
  // bytes back as something else.
  if (FirstInvalidUtf8(text).has_value()) return 0;
  FUZZ_CHECK(yaml_util::LoadDocument(*pinned, "pinned").ok());
  if (!spec.ok()) return 0;
  const absl::StatusOr<JobSpec> again = ParseJobSpec(*pinned, "pinned");
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->ops.size() == spec->ops.size());
  // Ids the daemon would store (ValidateJobSpec) come back as they were; one
  // yaml-cpp decoded into bytes that are not UTF-8 comes back as U+FFFD.
  for (const OpSpec& op : spec->ops) {
    if (!CheckPrintable("id", op.id, kMaxOpIdBytes).ok()) return 0;
  }
  std::map<std::string, const v1::OpResult*> results;
  for (const v1::OpResult& op : job.result().ops()) results[op.id()] = &op;
  for (const OpSpec& op : again->ops) {
    const v1::OpResult& ran = *results.at(op.id);
    FUZZ_CHECK(OverlapModeName(op.mode) == ran.mode());
    FUZZ_CHECK(TransportName(op.transport) == ran.transport());
  }
  return 0;
}
