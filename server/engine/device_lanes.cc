#include "server/engine/device_lanes.h"

#include <algorithm>

namespace overlap::engine {
namespace {

int Index(LaneUser user) { return static_cast<int>(user); }

}  // namespace

const char* LaneUserName(LaneUser user) { return user == LaneUser::kSession ? "session" : "job"; }

DeviceLanes::DeviceLanes(int device_count) {
  for (int d = 0; d < device_count; ++d) {
    devices_.push_back(std::make_unique<Device>());
    figures_.emplace_back().device = d;
  }
}

void DeviceLanes::CriticalBegin(int device, LaneUser user) {
  if (!Known(device)) return;
  absl::MutexLock lock(&mu_);
  ++figures_[device].critical_pending[Index(user)];
  ++figures_[device].critical_issued[Index(user)];
}

void DeviceLanes::CriticalEnd(int device, LaneUser user) {
  if (!Known(device)) return;
  absl::MutexLock lock(&mu_);
  int64_t& pending = figures_[device].critical_pending[Index(user)];
  pending = std::max<int64_t>(0, pending - 1);
}

bool DeviceLanes::PendingLocked(int device) const {
  if (!Known(device)) return false;
  for (int64_t pending : figures_[device].critical_pending) {
    if (pending > 0) return true;
  }
  return false;
}

bool DeviceLanes::CriticalPending(int device) const {
  absl::MutexLock lock(&mu_);
  return PendingLocked(device);
}

bool DeviceLanes::CriticalPendingOf(int device, LaneUser user) const {
  if (!Known(device)) return false;
  absl::MutexLock lock(&mu_);
  return figures_[device].critical_pending[Index(user)] > 0;
}

bool DeviceLanes::PassDeferred(const std::vector<int>& devices, LaneUser user, bool bound_near) {
  absl::MutexLock lock(&mu_);
  bool pending = false;
  for (int d : devices) pending = pending || PendingLocked(d);
  if (pending && !bound_near) return false;
  for (int d : devices) {
    if (!Known(d)) continue;
    ++figures_[d].deferred_sent[Index(user)];
    // Over bound where it goes beside critical work: on a device of its
    // group where some is pending.
    if (PendingLocked(d)) ++figures_[d].deferred_over_bound[Index(user)];
  }
  return true;
}

void DeviceLanes::CountYields(const std::vector<int>& devices, LaneUser user, int64_t chunks,
                              bool to_other) {
  if (chunks <= 0) return;
  absl::MutexLock lock(&mu_);
  for (int d : devices) {
    if (!Known(d)) continue;
    figures_[d].deferred_yielded[Index(user)] += chunks;
    if (to_other) figures_[d].deferred_yielded_to_other[Index(user)] += chunks;
  }
}

// Locks taken here and released in the destructor: outside what the analysis follows.
DeviceLanes::EnqueueLock::EnqueueLock(DeviceLanes& lanes, const std::vector<int>& sorted_devices)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  for (int d : sorted_devices) {
    if (!lanes.Known(d)) continue;
    absl::Mutex* mu = &lanes.devices_[d]->enqueue;
    if (!held_.empty() && held_.back() == mu) continue;
    mu->Lock();
    held_.push_back(mu);
  }
}

DeviceLanes::EnqueueLock::~EnqueueLock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  for (auto it = held_.rbegin(); it != held_.rend(); ++it) (*it)->Unlock();
}

std::vector<DeviceLaneFigures> DeviceLanes::Figures() const {
  absl::MutexLock lock(&mu_);
  return figures_;
}

}  // namespace overlap::engine
