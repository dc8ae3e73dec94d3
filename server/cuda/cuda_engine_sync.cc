// The watchdog: Synchronize polls instead of blocking in cudaDeviceSynchronize,
// so that a collective whose peer never arrives (or an NCCL async error) ends in
// ncclCommAbort and ABORTED rather than a daemon hung forever.
#include <pthread.h>

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/cuda/cuda_check.h"
#include "server/cuda/cuda_engine_impl.h"
#include "server/cuda/scoped_device.h"

namespace overlap::cuda {
namespace {

constexpr auto kPollInterval = std::chrono::microseconds(100);
// After an abort, NCCL's kernels exit; streams that do not drain by then are stuck.
constexpr double kDrainAfterAbortS = 10;

}  // namespace

absl::StatusOr<bool> CudaEngineImpl::PollStreamsIdle(const std::vector<int>& devices,
                                                     double timeout_s, bool check_nccl) {
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    bool busy = false;
    for (int device : devices) {
      ScopedDevice guard(device);
      RETURN_IF_ERROR(guard.status());
      for (int i = 0; i < kStreamsPerDevice; ++i) {
        const StreamSlot& slot = streams_[device * kStreamsPerDevice + i];
        const cudaError_t error = cudaStreamQuery(slot.stream.get());
        if (error == cudaErrorNotReady) {
          busy = true;
          continue;
        }
        if (error != cudaSuccess) {
          const absl::Status status =
              CudaErrorToStatus(error, "cudaStreamQuery", __FILE__, __LINE__);
          if (IsStickyCudaError(error)) healthy_.store(false);
          return absl::Status(status.code(),
                              absl::StrCat("device ", device, ": ", status.message()));
        }
      }
    }
    if (check_nccl) {
      for (const std::shared_ptr<NcclGroup>& group : comms_->Touching(devices)) {
        const absl::Status async = group->AsyncError();
        if (!async.ok()) {
          const std::vector<std::string> aborted = comms_->AbortTouching(devices);
          GetLogger("nccl")->error("NCCL error on devices [{}]: {}; aborted {}",
                                   absl::StrJoin(devices, ","), async.ToString(),
                                   absl::StrJoin(aborted, "; "));
          return absl::AbortedError(
              absl::StrCat("NCCL error on devices [", absl::StrJoin(devices, ","),
                           "]: ", async.message(), ": communicators aborted"));
        }
      }
    }
    if (!busy) return true;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed > timeout_s) return false;
    std::this_thread::sleep_for(kPollInterval);
  }
}

absl::Status CudaEngineImpl::WaitIdle(const std::vector<int>& devices) {
  for (int device : devices) {
    if (!ValidDevice(device)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown device ", device));
    }
  }
  const absl::Time asked = absl::Now();
  ASSIGN_OR_RETURN(bool idle, PollStreamsIdle(devices, config_.collective_timeout_s,
                                              /*check_nccl=*/true));
  const absl::Duration waited = absl::Now() - asked;
  if (waited > absl::Milliseconds(50)) {
    char thread[32] = "";
    pthread_getname_np(pthread_self(), thread, sizeof(thread));
    GetLogger("cuda")->debug("thread {} waited {} for devices [{}] to go idle", thread,
                             absl::FormatDuration(waited), absl::StrJoin(devices, ","));
  }
  if (idle) return absl::OkStatus();
  const std::vector<std::string> aborted = comms_->AbortTouching(devices);
  const std::string where = absl::StrJoin(devices, ",");
  GetLogger("nccl")->error("work on devices [{}] still running after {} s: aborted {}", where,
                           config_.collective_timeout_s,
                           aborted.empty() ? "no communicator" : absl::StrJoin(aborted, "; "));
  absl::StatusOr<bool> drained = PollStreamsIdle(devices, kDrainAfterAbortS, /*check_nccl=*/false);
  if (!drained.ok() || !*drained) {
    // Something other than NCCL is stuck: this process cannot recover the devices.
    healthy_.store(false);
    GetLogger("cuda")->critical("devices [{}] did not drain after aborting their communicators",
                                where);
  }
  return absl::AbortedError(absl::StrCat("collective timed out after ",
                                         config_.collective_timeout_s, " s on devices [", where,
                                         "]: communicators aborted"));
}

absl::Status CudaEngineImpl::Synchronize(const std::vector<int>& devices) {
  const absl::Status status = WaitIdle(devices);
  // A sticky error anywhere in the process means the context is gone.
  if (status.ok() && StickyErrorSeen()) {
    healthy_.store(false);
    return absl::UnavailableError("a device hit a sticky CUDA error earlier: restart required");
  }
  return status;
}

}  // namespace overlap::cuda
