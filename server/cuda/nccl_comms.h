// NCCL communicators of one process that drives every rank itself, keyed by
// (ordered device list, channel) and created lazily on first use: one
// ncclGetUniqueId, then ncclCommInitRankConfig for all ranks inside one
// ncclGroupStart/End from the calling thread.
//
// Communicators are NON-BLOCKING (config.blocking = 0) unless `nonblocking` is
// false: calls may return ncclInProgress and the caller polls
// ncclCommGetAsyncError (WaitReady). That is what lets the watchdog abort a hung
// collective instead of hanging with it; with blocking ones, measured on H200, a
// peer held back behind GEMMs kept the host inside NCCL until it arrived (they
// did launch each collective ~85 us sooner: docs/PERFORMANCE.md).
// An aborted group is dropped from the cache and rebuilt on next use.
//
// A group may pin NCCL's algorithm (ring or tree). NCCL reads NCCL_ALGO only
// while a communicator initialises and has no per-communicator setting
// (ncclConfig_t), so such a group is initialised with NCCL_ALGO in the
// environment, and only it: see AlgorithmEnvWindow in nccl_comms.cc.
//
// Thread safety: all methods may be called concurrently; the cache mutex is held
// only for look-ups, never across NCCL calls. A Group is shared_ptr-owned, so a
// caller keeps using it even while another thread drops it from the cache.
#pragma once

#include <nccl.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/engine/engine.h"

namespace overlap::cuda {

class NcclGroup {
 public:
  NcclGroup(std::vector<int> devices, int channel, int max_ctas, engine::LibraryAlgorithm algorithm,
            std::vector<ncclComm_t> comms)
      : devices_(std::move(devices)),
        channel_(channel),
        max_ctas_(max_ctas),
        algorithm_(algorithm),
        comms_(std::move(comms)) {}
  ~NcclGroup();  // finalize + destroy (abort when that fails); no-op after Abort
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  const std::vector<int>& devices() const { return devices_; }
  int channel() const { return channel_; }
  int max_ctas() const { return max_ctas_; }  // 0 = NCCL's own choice
  engine::LibraryAlgorithm algorithm() const { return algorithm_; }
  ncclComm_t comm(int rank) const { return comms_[rank]; }
  int size() const { return static_cast<int>(comms_.size()); }
  // "channel C on devices [a,b]" (+ " at most N CTAs", " NCCL_ALGO=allreduce:Tree")
  std::string Name() const;

  // Polls until no rank has an operation in progress. The first async error
  // becomes the status; DEADLINE_EXCEEDED after timeout_s.
  absl::Status WaitReady(double timeout_s) const;
  // One non-blocking poll: OK, or the first rank's async error (ncclInProgress is OK).
  absl::Status AsyncError() const;
  void Abort();

 private:
  const std::vector<int> devices_;
  const int channel_;
  const int max_ctas_;
  const engine::LibraryAlgorithm algorithm_;
  std::vector<ncclComm_t> comms_;
  bool aborted_ = false;
};

class NcclComms {
 public:
  // Call before other threads run: the first one puts the (parked) NCCL_ALGO
  // entry into the environment.
  NcclComms(double init_timeout_s, bool nonblocking);
  ~NcclComms();

  // The cached group, or a new one (INVALID_ARGUMENT for an empty or repeating
  // device list; the NCCL error of a failed init otherwise). With `max_ctas` > 0
  // its kernels use at most that many CTAs (ncclConfig_t.maxCTAs): a separate
  // communicator from the unlimited one of the same devices and channel; so is
  // one pinned to an `algorithm` (FAILED_PRECONDITION when the daemon's own
  // environment sets NCCL_ALGO, which then governs every communicator).
  absl::StatusOr<std::shared_ptr<NcclGroup>> Get(
      const std::vector<int>& devices, int channel, int max_ctas = 0,
      engine::LibraryAlgorithm algorithm = engine::LibraryAlgorithm::kLibraryChoice);
  // What Get refuses of a group: no devices, a repeated device, a negative channel.
  static absl::Status CheckGroup(const std::vector<int>& devices, int channel);
  // A communicator across processes (engine.h, CrossProcessCollective): this
  // process's ranks (`devices`, global_ranks[i] being devices[i]'s rank) of
  // the one named `id` (ncclUniqueId bytes, from NewId in some process),
  // created on first use by ncclCommInitRankConfig of every local rank in one
  // group. Its init waits for the other processes' ranks: DEADLINE_EXCEEDED
  // after the init timeout when they do not come.
  absl::StatusOr<std::shared_ptr<NcclGroup>> GetShared(const std::string& id, int nranks,
                                                       const std::vector<int>& devices,
                                                       const std::vector<int>& global_ranks,
                                                       int max_ctas);
  // A fresh ncclUniqueId, as bytes.
  static absl::StatusOr<std::string> NewId();
  // Every cached group that includes any of `devices`.
  std::vector<std::shared_ptr<NcclGroup>> Touching(const std::vector<int>& devices) const;
  // Aborts and drops every group touching `devices`; returns their names.
  std::vector<std::string> AbortTouching(const std::vector<int>& devices);

 private:
  // devices, channel, max_ctas, algorithm
  using Key = std::tuple<std::vector<int>, int, int, engine::LibraryAlgorithm>;
  absl::StatusOr<std::shared_ptr<NcclGroup>> Create(const std::vector<int>& devices, int channel,
                                                    int max_ctas,
                                                    engine::LibraryAlgorithm algorithm);
  // Create's communicators, with the environment held as Create chose.
  absl::StatusOr<std::shared_ptr<NcclGroup>> Init(const std::vector<int>& devices, int channel,
                                                  int max_ctas,
                                                  engine::LibraryAlgorithm algorithm);
  // Ranks ranks[i] (on devices[i]) of an `nranks` communicator named `id`.
  absl::StatusOr<std::shared_ptr<NcclGroup>> InitRanks(const ncclUniqueId& id, int nranks,
                                                       const std::vector<int>& devices,
                                                       const std::vector<int>& ranks, int channel,
                                                       int max_ctas,
                                                       engine::LibraryAlgorithm algorithm,
                                                       const std::string& name);

  const double init_timeout_s_;
  const bool nonblocking_;
  mutable absl::Mutex mu_;
  std::map<Key, std::shared_ptr<NcclGroup>> groups_ ABSL_GUARDED_BY(mu_);
  using SharedKey = std::pair<std::string, int>;  // id, max_ctas
  std::map<SharedKey, std::shared_ptr<NcclGroup>> shared_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap::cuda
