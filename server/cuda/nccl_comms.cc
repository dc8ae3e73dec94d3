#include "server/cuda/nccl_comms.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <set>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/enum_names.h"
#include "common/library_env.h"
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

// NCCL_ALGO's value for a pinned algorithm; empty for NCCL's own choice. It
// names the all-reduce only, so the communicator's other collectives keep
// every algorithm (NCCL 2.28 reads it in ncclTopoTuneModel, at init, for
// groups of two ranks or more).
std::string NcclAlgoValue(engine::LibraryAlgorithm algorithm) {
  using A = engine::LibraryAlgorithm;
  static constexpr EnumName<A> kValues[] = {
      {A::kLibraryChoice, ""}, {A::kRing, "allreduce:Ring"}, {A::kTree, "allreduce:Tree"}};
  return NameOf(kValues, algorithm);
}

// The NCCL_ALGO entry a pinned communicator initialises under. setenv and
// unsetenv may move the environment array while another thread's getenv walks
// it (gRPC's, NCCL's own threads), so the entry is put in once, with putenv,
// before other threads run, under a name nobody reads ("_CCL_ALGO"). Opening
// the window writes the value while the name is still wrong, then the first
// byte: 'N'; closing writes '_' back. Nothing is added or removed after
// startup. Open and Close are called under EnvironmentMutex() for writing.
class AlgorithmEnvWindow {
 public:
  static AlgorithmEnvWindow& Get() {
    static AlgorithmEnvWindow* const window = new AlgorithmEnvWindow;  // lives in environ
    return *window;
  }
  // NCCL_ALGO as the daemon was started with; empty when unset.
  const std::string& users_value() const { return users_value_; }
  void Open(const char* value) {
    std::snprintf(entry_ + kNameLength, sizeof(entry_) - kNameLength, "%s", value);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    entry_[0] = 'N';
  }
  void Close() {
    entry_[0] = '_';
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }

 private:
  static constexpr size_t kNameLength = sizeof("NCCL_ALGO=") - 1;
  AlgorithmEnvWindow() {
    if (const char* set = std::getenv("NCCL_ALGO")) {
      users_value_ = set;
      return;  // it governs every communicator; no window
    }
    std::snprintf(entry_, sizeof(entry_), "_CCL_ALGO=");
    putenv(entry_);
  }
  std::string users_value_;
  char entry_[32] = {};
};

}  // namespace

std::string NcclGroup::Name() const {
  const std::string algo = NcclAlgoValue(algorithm_);
  return absl::StrCat("channel ", channel_, " on devices [", absl::StrJoin(devices_, ","), "]",
                      max_ctas_ > 0 ? absl::StrCat(" at most ", max_ctas_, " CTAs") : "",
                      !algo.empty() ? absl::StrCat(" NCCL_ALGO=", algo) : "");
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

NcclComms::NcclComms(double init_timeout_s, bool nonblocking)
    : init_timeout_s_(init_timeout_s), nonblocking_(nonblocking) {
  AlgorithmEnvWindow::Get();
}

NcclComms::~NcclComms() {
  absl::MutexLock lock(&mu_);
  groups_.clear();
  shared_.clear();
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
                                                          int channel, int max_ctas,
                                                          engine::LibraryAlgorithm algorithm) {
  RETURN_IF_ERROR(CheckGroup(devices, channel));
  if (max_ctas < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_ctas must be >= 0, got ", max_ctas));
  }
  const std::string& users = AlgorithmEnvWindow::Get().users_value();
  if (algorithm != engine::LibraryAlgorithm::kLibraryChoice && !users.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "NCCL_ALGO=", users, " is set in overlapd's environment and governs every communicator: ",
        "an op cannot pin NCCL_ALGO=", NcclAlgoValue(algorithm),
        " (unset it for the daemon to choose per op)"));
  }
  const Key key{devices, channel, max_ctas, algorithm};
  {
    absl::MutexLock lock(&mu_);
    auto it = groups_.find(key);
    if (it != groups_.end()) return it->second;
  }
  // Only the thread that owns these devices creates their group, so no other
  // thread races to insert the same key.
  ASSIGN_OR_RETURN(std::shared_ptr<NcclGroup> group, Create(devices, channel, max_ctas, algorithm));
  absl::MutexLock lock(&mu_);
  return groups_.emplace(key, std::move(group)).first->second;
}

absl::StatusOr<std::shared_ptr<NcclGroup>> NcclComms::Create(const std::vector<int>& devices,
                                                             int channel, int max_ctas,
                                                             engine::LibraryAlgorithm algorithm) {
  // A pinned group holds the environment for writing until its init is done,
  // so no other communicator initialises while NCCL_ALGO is set; the others
  // only read it, and may initialise at once.
  const std::string algo = NcclAlgoValue(algorithm);
  absl::Mutex& env = EnvironmentMutex();
  if (!algo.empty()) {
    absl::WriterMutexLock lock(&env);
    AlgorithmEnvWindow::Get().Open(algo.c_str());
    absl::Cleanup close = [] { AlgorithmEnvWindow::Get().Close(); };
    return Init(devices, channel, max_ctas, algorithm);
  }
  absl::ReaderMutexLock lock(&env);
  return Init(devices, channel, max_ctas, algorithm);
}

absl::StatusOr<std::shared_ptr<NcclGroup>> NcclComms::Init(const std::vector<int>& devices,
                                                           int channel, int max_ctas,
                                                           engine::LibraryAlgorithm algorithm) {
  ncclUniqueId id;
  NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
  const std::string name = absl::StrCat("overlap-ch", channel, "-dev", absl::StrJoin(devices, "."),
                                        max_ctas > 0 ? absl::StrCat("-ctas", max_ctas) : "",
                                        algorithm == engine::LibraryAlgorithm::kRing   ? "-ring"
                                        : algorithm == engine::LibraryAlgorithm::kTree ? "-tree"
                                                                                       : "");
  std::vector<int> ranks(devices.size());
  for (size_t r = 0; r < ranks.size(); ++r) ranks[r] = static_cast<int>(r);
  return InitRanks(id, static_cast<int>(devices.size()), devices, ranks, channel, max_ctas,
                   algorithm, name);
}

absl::StatusOr<std::string> NcclComms::NewId() {
  ncclUniqueId id;
  NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<std::shared_ptr<NcclGroup>> NcclComms::GetShared(
    const std::string& id, int nranks, const std::vector<int>& devices,
    const std::vector<int>& global_ranks, int max_ctas) {
  ncclUniqueId unique;
  if (id.size() != sizeof(unique.internal)) {
    return absl::InvalidArgumentError(absl::StrCat("communicator id of ", id.size(),
                                                   " bytes; NCCL's are ", sizeof(unique.internal)));
  }
  RETURN_IF_ERROR(CheckGroup(devices, 0));
  if (global_ranks.size() != devices.size()) {
    return absl::InvalidArgumentError("one global rank per local device");
  }
  for (int rank : global_ranks) {
    if (rank < 0 || rank >= nranks) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of ", nranks));
    }
  }
  const SharedKey key{id, max_ctas};
  {
    absl::MutexLock lock(&mu_);
    auto it = shared_.find(key);
    if (it != shared_.end()) return it->second;
  }
  std::memcpy(unique.internal, id.data(), id.size());
  const std::string name =
      absl::StrCat("overlap-shared-ranks", absl::StrJoin(global_ranks, "."), "-of", nranks,
                   max_ctas > 0 ? absl::StrCat("-ctas", max_ctas) : "");
  absl::StatusOr<std::shared_ptr<NcclGroup>> group;
  {
    absl::ReaderMutexLock env(&EnvironmentMutex());
    group = InitRanks(unique, nranks, devices, global_ranks, /*channel=*/0, max_ctas,
                      engine::LibraryAlgorithm::kLibraryChoice, name);
  }
  if (!group.ok()) return group.status();
  absl::MutexLock lock(&mu_);
  return shared_.emplace(key, std::move(*group)).first->second;
}

absl::StatusOr<std::shared_ptr<NcclGroup>> NcclComms::InitRanks(
    const ncclUniqueId& id, int nranks, const std::vector<int>& devices,
    const std::vector<int>& ranks, int channel, int max_ctas, engine::LibraryAlgorithm algorithm,
    const std::string& name) {
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  NCCL_RETURN_IF_ERROR(ncclGroupStart());
  absl::Status init_status;
  for (size_t local = 0; local < devices.size() && init_status.ok(); ++local) {
    const int rank = ranks[local];
    ScopedDevice guard(devices[local]);
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
    const ncclResult_t result = ncclCommInitRankConfig(&comms[local], nranks, id, rank, &config);
    if (result != ncclSuccess && result != ncclInProgress) {
      init_status = NcclErrorToStatus(result, "ncclCommInitRankConfig", __FILE__, __LINE__);
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  if (init_status.ok() && end != ncclSuccess && end != ncclInProgress) {
    init_status = NcclErrorToStatus(end, "ncclGroupEnd", __FILE__, __LINE__);
  }
  auto group = std::make_shared<NcclGroup>(devices, channel, max_ctas, algorithm, comms);
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
  auto touches = [&](const NcclGroup& group) {
    for (int device : group.devices()) {
      if (std::find(devices.begin(), devices.end(), device) != devices.end()) return true;
    }
    return false;
  };
  absl::MutexLock lock(&mu_);
  for (const auto& [key, group] : groups_) {
    if (touches(*group)) touching.push_back(group);
  }
  for (const auto& [key, group] : shared_) {
    if (touches(*group)) touching.push_back(group);
  }
  return touching;
}

std::vector<std::string> NcclComms::AbortTouching(const std::vector<int>& devices) {
  std::vector<std::shared_ptr<NcclGroup>> dropped = Touching(devices);
  {
    absl::MutexLock lock(&mu_);
    for (const auto& group : dropped) {
      groups_.erase(Key{group->devices(), group->channel(), group->max_ctas(), group->algorithm()});
      for (auto it = shared_.begin(); it != shared_.end();) {
        it = it->second == group ? shared_.erase(it) : std::next(it);
      }
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
