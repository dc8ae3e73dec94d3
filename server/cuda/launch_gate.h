// Launch gates of the CUDA engine (engine.h, HoldStreams). A held stream runs a
// one-thread kernel that polls its ticket's slot in mapped, pinned host memory;
// the host opens the gate by writing the ticket there. The GPU's global timer
// bounds every hold, so a host call that waits for the GPU while a stream is
// held (cudaFree synchronizes the device; NCCL may set up connections) cannot
// deadlock: the hold times out, the work runs, and the timeout is counted.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace overlap::cuda {

class LaunchGate {
 public:
  static constexpr int kMaxDevices = 64;

  // Pinned memory, portable to every device (one UVA address for all).
  static absl::StatusOr<std::unique_ptr<LaunchGate>> Create();
  ~LaunchGate();

  int64_t NextTicket();
  // Enqueues the hold on `stream`, whose device `device` must be current.
  absl::Status Hold(cudaStream_t stream, int device, int64_t ticket, double max_hold_ms);
  void Open(int64_t ticket);
  // Holds on `device` that timed out; exact once the device is synchronized.
  int64_t Timeouts(int device) const;

 private:
  // Tickets count up; each slot keeps the highest ticket opened there, so a hold
  // is released by its own ticket only (unless it lags kSlots tickets behind).
  static constexpr int kSlots = 1024;
  struct Slab {
    int64_t opened[kSlots];
    int64_t timeouts[kMaxDevices];
  };
  explicit LaunchGate(Slab* slab) : slab_(slab) {}

  Slab* const slab_;  // mapped, pinned host memory, written by the host and the GPUs
  absl::Mutex mu_;    // serializes the host's writes to `opened`
  int64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace overlap::cuda
