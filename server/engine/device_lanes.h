// DeviceLanes: the node's lanes as one state per device, shared by every user
// of a device (the session lanes' thread and the jobs that run beside
// sessions), so that "critical work pending on device D" means any user's.
//
// Per device it keeps:
//  - critical work queued or running, counted by whoever issued it (a
//    session's critical collective from enqueue to its end event, a job's
//    critical-path collective while its streams are at it), by user;
//  - the deferred gate: a deferred sender (a session's deferred chunk, a job's
//    deferred collective chunk in scheduler: dynamic) asks PassDeferred before
//    it enqueues; the gate refuses while critical work of any user is pending
//    on one of the chunk's devices, unless the sender says its bound is near
//    (then the chunk goes and is counted over bound). The check and the count
//    are one step under the gate's lock, and critical work registers under the
//    same lock, so a chunk the gate lets through was sent while no critical
//    work was pending, or was counted over bound;
//  - the enqueue mutex: the engine takes calls for one device from one thread
//    at a time (engine.h); users on two threads serialise their calls through
//    it (LaneSharedEngine, lane_shared_engine.h, takes it around each call).
//
// Yields are the senders' to count (a chunk that waits counts one, however
// often it asks: deferred_dispatcher.h); they report them with CountYields.
//
// Thread safety: every method from any thread. No I/O under its locks.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace overlap::engine {

// Who issues work on a device's lanes.
enum class LaneUser { kSession = 0, kJob = 1 };
inline constexpr int kLaneUsers = 2;
const char* LaneUserName(LaneUser user);  // "session" | "job"

// One device's shared lane figures, by LaneUser.
struct DeviceLaneFigures {
  int device = 0;
  std::array<int64_t, kLaneUsers> critical_pending{};  // now
  std::array<int64_t, kLaneUsers> critical_issued{};   // critical works registered, ever
  std::array<int64_t, kLaneUsers> deferred_sent{};     // chunks the gate let through
  std::array<int64_t, kLaneUsers> deferred_yielded{};  // chunks that waited for critical work
  // Of deferred_yielded: those that waited for the other user's critical work
  // (a job's chunk for a session's, a session's for a job's).
  std::array<int64_t, kLaneUsers> deferred_yielded_to_other{};
  // Of deferred_sent: sent while critical work was pending on this device, at their bound.
  std::array<int64_t, kLaneUsers> deferred_over_bound{};
};

class DeviceLanes {
 public:
  explicit DeviceLanes(int device_count);
  DeviceLanes(const DeviceLanes&) = delete;
  DeviceLanes& operator=(const DeviceLanes&) = delete;

  int device_count() const { return static_cast<int>(devices_.size()); }

  // Critical work of `user` on `device` became pending / is done. Unknown
  // devices are ignored (a remote rank's).
  void CriticalBegin(int device, LaneUser user);
  void CriticalEnd(int device, LaneUser user);
  // Whether critical work is pending on `device`: of any user, or of `user` only.
  bool CriticalPending(int device) const;
  bool CriticalPendingOf(int device, LaneUser user) const;

  // The deferred gate for one chunk over `devices`: true (and counted sent)
  // when no critical work is pending on any of them, or when `bound_near`
  // (counted over bound where critical work was pending); false otherwise:
  // the caller does not send it now and asks again later.
  bool PassDeferred(const std::vector<int>& devices, LaneUser user, bool bound_near);
  // `chunks` deferred chunks of `user` over `devices` waited for critical
  // work; `to_other`: for the other user's (none of `user`'s own was pending there).
  void CountYields(const std::vector<int>& devices, LaneUser user, int64_t chunks,
                   bool to_other = false);

  // Holds the enqueue mutexes of `devices` (each once, in device order, so
  // that two holders never deadlock) for its life. Unknown devices are skipped.
  class EnqueueLock {
   public:
    EnqueueLock(DeviceLanes& lanes, const std::vector<int>& sorted_devices);
    ~EnqueueLock();
    EnqueueLock(const EnqueueLock&) = delete;
    EnqueueLock& operator=(const EnqueueLock&) = delete;

   private:
    std::vector<absl::Mutex*> held_;
  };

  std::vector<DeviceLaneFigures> Figures() const;

 private:
  struct Device {
    absl::Mutex enqueue;  // held across one engine call; never with mu_
  };
  bool Known(int device) const { return device >= 0 && device < device_count(); }
  bool PendingLocked(int device) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::vector<std::unique_ptr<Device>> devices_;
  mutable absl::Mutex mu_;
  std::vector<DeviceLaneFigures> figures_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap::engine
