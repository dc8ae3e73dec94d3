#include "server/cuda/nccl_comms.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/cuda/cuda_check.h"
#include "server/cuda/scoped_device.h"

namespace overlap::cuda {
namespace {

constexpr auto kPollInterval = std::chrono::microseconds(100);
// Poll without sleeping this long first, so that a launch that completes
// quickly does not hold the host's next enqueue back by a whole interval.
constexpr double kSpinS = 500e-6;
constexpr double kFinalizeTimeoutS = 10;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::string NcclGroup::Name() const {
  return absl::StrCat("channel ", channel_, " on devices [", absl::StrJoin(devices_, ","), "]",
                      max_ctas_ > 0 ? absl::StrCat(" at most ", max_ctas_, " CTAs") : "");
}

absl::Status NcclGroup::AsyncError() const {
  for (size_t rank = 0; rank < comms_.size(); ++rank) {
    if (comms_[rank] == nullptr) {
      return absl::AbortedError(absl::StrCat("communicator ", Name(), " was aborted"));
    }
    ncclResult_t async = ncclSuccess;
    NCCL_RETURN_IF_ERROR(ncclCommGetAsyncError(comms_[rank], &async));
    if (async != ncclSuccess && async != ncclInProgress) {
      const absl::Status status =
          NcclErrorToStatus(async, "ncclCommGetAsyncError", __FILE__, __LINE__);
      return absl::Status(status.code(), absl::StrCat("communicator ", Name(), " rank ", rank, ": ",
                                                      status.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status NcclGroup::WaitReady(double timeout_s) const {
  const auto start = std::chrono::steady_clock::now();
  for (size_t rank = 0; rank < comms_.size(); ++rank) {
    if (comms_[rank] == nullptr) {
      return absl::AbortedError(absl::StrCat("communicator ", Name(), " was aborted"));
    }
    while (true) {
      ncclResult_t async = ncclSuccess;
      NCCL_RETURN_IF_ERROR(ncclCommGetAsyncError(comms_[rank], &async));
      if (async == ncclSuccess) break;
      if (async != ncclInProgress) {
        const absl::Status status =
            NcclErrorToStatus(async, "ncclCommGetAsyncError", __FILE__, __LINE__);
        return absl::Status(status.code(), absl::StrCat("communicator ", Name(), " rank ", rank,
                                                        ": ", status.message()));
      }
      if (SecondsSince(start) > timeout_s) {
        return absl::DeadlineExceededError(absl::StrCat(
            "communicator ", Name(), " rank ", rank, " still in progress after ", timeout_s, " s"));
      }
      if (SecondsSince(start) < kSpinS) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(kPollInterval);
      }
    }
  }
  return absl::OkStatus();
}

void NcclGroup::Abort() {
  for (size_t rank = 0; rank < comms_.size(); ++rank) {
    if (comms_[rank] == nullptr) continue;
    ScopedDevice guard(devices_[rank]);
    const ncclResult_t result = ncclCommAbort(comms_[rank]);
    if (result != ncclSuccess && result != ncclInProgress) {
      GetLogger("nccl")->error("ncclCommAbort of {} rank {} failed: {}", Name(), rank,
                               ncclGetErrorString(result));
    }
    comms_[rank] = nullptr;
  }
  aborted_ = true;
}

NcclGroup::~NcclGroup() {
  if (aborted_) return;
  // Finalize flushes outstanding work; with non-blocking communicators it returns
  // ncclInProgress and completes in the background, so it is polled.
  bool finalized = ncclGroupStart() == ncclSuccess;
  for (size_t rank = 0; finalized && rank < comms_.size(); ++rank) {
    ScopedDevice guard(devices_[rank]);
    const ncclResult_t result = ncclCommFinalize(comms_[rank]);
    finalized = result == ncclSuccess || result == ncclInProgress;
  }
  const ncclResult_t end = ncclGroupEnd();
  finalized = finalized && (end == ncclSuccess || end == ncclInProgress);
  if (finalized) finalized = WaitReady(kFinalizeTimeoutS).ok();
  if (!finalized) {
    GetLogger("nccl")->warn("finalizing communicator {} failed: aborting it", Name());
    Abort();
    return;
  }
  for (size_t rank = 0; rank < comms_.size(); ++rank) {
    ScopedDevice guard(devices_[rank]);
    const ncclResult_t result = ncclCommDestroy(comms_[rank]);
    if (result != ncclSuccess && result != ncclInProgress) {
      GetLogger("nccl")->error("ncclCommDestroy of {} rank {} failed: {}", Name(), rank,
                               ncclGetErrorString(result));
    }
  }
}

NcclComms::~NcclComms() {
  absl::MutexLock lock(&mu_);
  groups_.clear();
}

absl::Status NcclComms::CheckGroup(const std::vector<int>& devices, int channel) {
  if (devices.empty()) return absl::InvalidArgumentError("communicator with no devices");
  if (std::set<int>(devices.begin(), devices.end()).size() != devices.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("communicator devices repeat: [", absl::StrJoin(devices, ","), "]"));
  }
  if (channel < 0) {
    return absl::InvalidArgumentError(absl::StrCat("channel must be >= 0, got ", channel));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<NcclGroup>> NcclComms::Get(const std::vector<int>& devices,
                                                          int channel, int max_ctas) {
  RETURN_IF_ERROR(CheckGroup(devices, channel));
  if (max_ctas < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_ctas must be >= 0, got ", max_ctas));
  }
  const Key key{devices, channel, max_ctas};
  {
    absl::MutexLock lock(&mu_);
    auto it = groups_.find(key);
    if (it != groups_.end()) return it->second;
  }
  // Only the thread that owns these devices creates their group, so no other
  // thread races to insert the same key.
  ASSIGN_OR_RETURN(std::shared_ptr<NcclGroup> group, Create(devices, channel, max_ctas));
  absl::MutexLock lock(&mu_);
  return groups_.emplace(key, std::move(group)).first->second;
}

absl::StatusOr<std::shared_ptr<NcclGroup>> NcclComms::Create(const std::vector<int>& devices,
                                                             int channel, int max_ctas) {
  ncclUniqueId id;
  NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
  const std::string name =
      absl::StrCat("overlap-ch", channel, "-dev", absl::StrJoin(devices, "."),
                   max_ctas > 0 ? absl::StrCat("-ctas", max_ctas) : "");
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  const int nranks = static_cast<int>(devices.size());
  NCCL_RETURN_IF_ERROR(ncclGroupStart());
  absl::Status init_status;
  for (int rank = 0; rank < nranks && init_status.ok(); ++rank) {
    ScopedDevice guard(devices[rank]);
    init_status = guard.status();
    if (!init_status.ok()) break;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = nonblocking_ ? 0 : 1;
    config.commName = name.c_str();
    if (max_ctas > 0) {
      config.maxCTAs = max_ctas;
      // NCCL's default floor may be above a small budget.
      config.minCTAs = 1;
    }
    const ncclResult_t result = ncclCommInitRankConfig(&comms[rank], nranks, id, rank, &config);
    if (result != ncclSuccess && result != ncclInProgress) {
      init_status = NcclErrorToStatus(result, "ncclCommInitRankConfig", __FILE__, __LINE__);
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  if (init_status.ok() && end != ncclSuccess && end != ncclInProgress) {
    init_status = NcclErrorToStatus(end, "ncclGroupEnd", __FILE__, __LINE__);
  }
  auto group = std::make_shared<NcclGroup>(devices, channel, max_ctas, comms);
  if (init_status.ok()) {
    for (ncclComm_t comm : comms) {
      if (comm == nullptr) init_status = absl::InternalError("ncclCommInitRankConfig gave no comm");
    }
  }
  if (init_status.ok()) init_status = group->WaitReady(init_timeout_s_);
  if (!init_status.ok()) {
    group->Abort();
    return absl::Status(
        init_status.code(),
        absl::StrCat("creating NCCL communicator ", group->Name(), ": ", init_status.message()));
  }
  GetLogger("nccl")->info("created communicator {}", group->Name());
  return group;
}

std::vector<std::shared_ptr<NcclGroup>> NcclComms::Touching(const std::vector<int>& devices) const {
  std::vector<std::shared_ptr<NcclGroup>> touching;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, group] : groups_) {
    for (int device : std::get<0>(key)) {
      if (std::find(devices.begin(), devices.end(), device) != devices.end()) {
        touching.push_back(group);
        break;
      }
    }
  }
  return touching;
}

std::vector<std::string> NcclComms::AbortTouching(const std::vector<int>& devices) {
  std::vector<std::shared_ptr<NcclGroup>> dropped = Touching(devices);
  {
    absl::MutexLock lock(&mu_);
    for (const auto& group : dropped) {
      groups_.erase(Key{group->devices(), group->channel(), group->max_ctas()});
    }
  }
  std::vector<std::string> names;
  for (const auto& group : dropped) {
    group->Abort();
    names.push_back(group->Name());
  }
  return names;
}

}  // namespace overlap::cuda
