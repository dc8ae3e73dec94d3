#include "server/cuda/launch_gate.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "server/cuda/cuda_check.h"
#include "server/cuda/kernels.h"

namespace overlap::cuda {

absl::StatusOr<std::unique_ptr<LaunchGate>> LaunchGate::Create() {
  void* memory = nullptr;
  CUDA_RETURN_IF_ERROR(
      cudaHostAlloc(&memory, sizeof(Slab), cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(memory, 0, sizeof(Slab));
  return std::unique_ptr<LaunchGate>(new LaunchGate(static_cast<Slab*>(memory)));
}

LaunchGate::~LaunchGate() {
  // The engine synchronizes every device before its members go: no hold is left.
  const cudaError_t error = cudaFreeHost(slab_);
  if (error != cudaSuccess) {
    GetLogger("cuda")->warn("cudaFreeHost (launch gate): {}", cudaGetErrorString(error));
  }
}

int64_t LaunchGate::NextTicket() {
  absl::MutexLock lock(&mu_);
  return next_ticket_++;
}

absl::Status LaunchGate::Hold(cudaStream_t stream, int device, int64_t ticket, double max_hold_ms) {
  if (device < 0 || device >= kMaxDevices) {
    return absl::InvalidArgumentError(
        absl::StrCat("launch gate: device ", device, " above ", kMaxDevices - 1));
  }
  if (!(max_hold_ms > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("launch gate: max_hold_ms ", max_hold_ms));
  }
  CUDA_RETURN_IF_ERROR(LaunchHoldAtGate(&slab_->opened[ticket % kSlots], ticket,
                                        static_cast<uint64_t>(max_hold_ms * 1e6),
                                        &slab_->timeouts[device], stream));
  return absl::OkStatus();
}

void LaunchGate::Open(int64_t ticket) {
  absl::MutexLock lock(&mu_);
  int64_t* slot = &slab_->opened[ticket % kSlots];
  // Atomic store: the GPUs read the slot while the host writes it.
  if (__atomic_load_n(slot, __ATOMIC_RELAXED) < ticket) {
    __atomic_store_n(slot, ticket, __ATOMIC_RELEASE);
  }
}

int64_t LaunchGate::Timeouts(int device) const {
  if (device < 0 || device >= kMaxDevices) return 0;
  return __atomic_load_n(&slab_->timeouts[device], __ATOMIC_ACQUIRE);
}

}  // namespace overlap::cuda
