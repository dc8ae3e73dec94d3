// LaunchGates: holding streams so that a timed iteration measures the GPUs
// alone, as a training loop whose host runs ahead sees them, and not the
// host's enqueue latency (a non-blocking NCCL communicator queues its kernels
// from a background thread some 0.1 ms after the call returns). An engine
// without gates, or with them off (launch_gate: false), answers null to
// Engine::Gates().
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/engine/engine_types.h"

namespace overlap::engine {

class LaunchGates {
 public:
  virtual ~LaunchGates() = default;

  // Holds each of `streams` (of any devices): what is queued behind the hold
  // runs only once ReleaseGate(ticket) is called, or once `max_hold_ms` has
  // passed (a held stream must never deadlock a host call that waits for the
  // GPU).
  virtual absl::StatusOr<int64_t> HoldStreams(const std::vector<StreamId>& streams,
                                              double max_hold_ms) = 0;
  virtual absl::Status ReleaseGate(int64_t ticket) = 0;
  // The holds on `device` that ended by timing out (exact once the device is
  // synchronized).
  virtual int64_t GateTimeouts(int device) const = 0;
};

}  // namespace overlap::engine
