#include "server/sessions/session_frames.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/text.h"

namespace overlap::sessions {
namespace {

constexpr size_t kMaxNameBytes = 128;

absl::StatusOr<absl::Duration> Seconds(double value, absl::Duration otherwise, const char* field) {
  if (!std::isfinite(value) || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": must be 0 (the daemon's) or more"));
  }
  return value == 0 ? otherwise : absl::Seconds(value);
}

}  // namespace

absl::StatusOr<OpenRequest> OpenRequestFrom(const v1::OpenSessionRequest& request,
                                            const OpenDefaults& defaults,
                                            absl::Duration* join_timeout) {
  OpenRequest out;
  if (request.name().empty() || request.name().size() > kMaxNameBytes ||
      FirstInvalidUtf8(request.name()).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("name: a session's name is 1 to ", kMaxNameBytes, " bytes of UTF-8"));
  }
  out.name = request.name();
  out.graph_text = request.graph();
  out.rank = request.rank();
  if (request.priority().empty() || request.priority() == "critical") {
    out.priority = Priority::kCritical;
  } else if (request.priority() == "deferred") {
    out.priority = Priority::kDeferred;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("priority: critical or deferred (got ",
                                                   QuotedExcerpt(request.priority(), 40), ")"));
  }
  if (!std::isfinite(request.deferred_bound_ms()) || request.deferred_bound_ms() < 0) {
    return absl::InvalidArgumentError("deferred_bound_ms: must be 0 (the daemon's) or more");
  }
  out.deferred_bound_ms =
      request.deferred_bound_ms() > 0 ? request.deferred_bound_ms() : defaults.deferred_bound_ms;
  absl::StatusOr<absl::Duration> join =
      Seconds(request.join_timeout_s(), defaults.join_timeout, "join_timeout_s");
  if (!join.ok()) return join.status();
  *join_timeout = std::min(*join, defaults.join_timeout);  // a request may only lower it
  absl::StatusOr<absl::Duration> step =
      Seconds(request.step_timeout_s(), defaults.step_timeout, "step_timeout_s");
  if (!step.ok()) return step.status();
  out.step_timeout = *step;
  if (request.chunk_kib() < 0) return absl::InvalidArgumentError("chunk_kib: must be 0 or more");
  out.chunk_bytes = int64_t{request.chunk_kib() > 0 ? request.chunk_kib() : 256} * 1024;
  return out;
}

v1::SessionFrame OpenReplyFrame(const SessionRegistry::Joined& joined,
                                const engine::Engine& engine) {
  v1::SessionFrame frame;
  v1::OpenSessionReply& reply = *frame.mutable_opened();
  reply.set_session_id(joined.session_id);
  reply.set_device(joined.device);
  reply.set_device_pci_bus_id(engine.GetDeviceInfo(joined.device).pci_bus_id);
  reply.set_backend(engine.Name());
  reply.set_world(joined.plan->world);
  for (const OpSpec& op : joined.plan->graph.ops) reply.add_ops(op.id);
  for (const TensorNeed& need : joined.plan->needs) {
    v1::TensorNeed& out = *reply.add_needs();
    out.set_op(need.op_id);
    out.set_tensor(static_cast<v1::SessionTensor>(need.kind));
    out.set_rows(need.rows);
    out.set_cols(need.cols);
    out.set_dtype(need.kind == TensorKind::kSignals ? "u64" : DTypeName(need.dtype));
    out.set_bytes(need.bytes);
  }
  return frame;
}

bool ValidTensor(int tensor) {
  return tensor >= static_cast<int>(TensorKind::kX) &&
         tensor <= static_cast<int>(TensorKind::kSignals);
}

}  // namespace overlap::sessions
