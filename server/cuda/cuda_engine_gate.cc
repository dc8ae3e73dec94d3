// Launch gates: HoldStreams, ReleaseGate (engine/launch_gates.h; the mechanism is launch_gate.h).
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/cuda/cuda_engine_impl.h"
#include "server/cuda/scoped_device.h"

namespace overlap::cuda {

absl::StatusOr<int64_t> CudaEngineImpl::HoldStreams(const std::vector<engine::StreamId>& streams,
                                                    double max_hold_ms) {
  if (gate_ == nullptr) {
    return absl::FailedPreconditionError("cuda backend: no launch gates (launch_gate off)");
  }
  std::vector<const StreamSlot*> slots;
  for (engine::StreamId stream : streams) {
    ASSIGN_OR_RETURN(const StreamSlot* slot, LookupStream(stream));
    slots.push_back(slot);
  }
  const int64_t ticket = gate_->NextTicket();
  for (size_t i = 0; i < slots.size(); ++i) {
    ScopedDevice guard(slots[i]->device);
    absl::Status held = guard.status();
    if (held.ok()) {
      held = gate_->Hold(slots[i]->stream.get(), slots[i]->device, ticket, max_hold_ms);
    }
    if (!held.ok()) {
      gate_->Open(ticket);  // the streams already held run on
      return held;
    }
  }
  return ticket;
}

absl::Status CudaEngineImpl::ReleaseGate(int64_t ticket) {
  if (gate_ == nullptr) {
    return absl::FailedPreconditionError("cuda backend: no launch gates (launch_gate off)");
  }
  gate_->Open(ticket);
  return absl::OkStatus();
}

int64_t CudaEngineImpl::GateTimeouts(int device) const {
  return gate_ == nullptr ? 0 : gate_->Timeouts(device);
}

}  // namespace overlap::cuda
