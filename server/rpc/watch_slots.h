// The WatchJob streams the daemon serves at once, shared out so that no one
// caller can hold them all (each stream holds one of gRPC's threads while it
// lasts):
//   - at most `max_total` streams in all (config max_watchers);
//   - a caller who is neither an admin nor the unix socket's owner (the
//     daemon's own uid) holds at most `per_user` of them (config
//     max_watchers_per_user; 0 = a quarter of max_total, at least 1), and
//     all such callers together at most max_total - reserved(): the rest is
//     kept for admins and the socket's owner, whose `submit --wait` and
//     `watch` find a slot whatever the users hold. reserved() is
//     max_total / 16, at least 1 where max_total > 1.
// A refusal is RESOURCE_EXHAUSTED saying whose share, or which cap, is full.
//
// Thread safety: Take from any thread; a Slot may be released on any thread.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace overlap::rpc {

class WatchSlots {
 public:
  // A slot taken; given back when destroyed. Move-only.
  class Slot {
   public:
    Slot(Slot&& other) noexcept
        : slots_(other.slots_), owner_(std::move(other.owner_)), privileged_(other.privileged_) {
      other.slots_ = nullptr;
    }
    Slot& operator=(Slot&&) = delete;
    Slot(const Slot&) = delete;
    ~Slot();

   private:
    friend class WatchSlots;
    Slot(WatchSlots* slots, std::string owner, bool privileged)
        : slots_(slots), owner_(std::move(owner)), privileged_(privileged) {}
    WatchSlots* slots_;
    std::string owner_;
    bool privileged_;
  };

  // `max_total` >= 1; `max_per_user` >= 0 (0: a quarter of max_total).
  WatchSlots(int max_total, int max_per_user);

  // A slot for the caller owning `owner` (described as `who` in a refusal);
  // `privileged` for an admin or the socket's owner.
  absl::StatusOr<Slot> Take(const std::string& owner, const std::string& who, bool privileged);

  int per_user() const { return per_user_; }
  int reserved() const { return reserved_; }

 private:
  void Release(const std::string& owner, bool privileged);

  const int max_total_;
  const int per_user_;
  const int reserved_;
  absl::Mutex mu_;
  int total_ ABSL_GUARDED_BY(mu_) = 0;
  int unprivileged_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int> by_owner_ ABSL_GUARDED_BY(mu_);  // unprivileged callers only
};

// Small enough to live here (no .cc of its own).
namespace watch_slots_internal {

inline int ShareOf(int max_total, int max_per_user) {
  const int share = max_per_user > 0 ? max_per_user : max_total / 4;
  return std::clamp(share, 1, max_total);
}

inline int ReservedOf(int max_total) { return max_total > 1 ? std::max(1, max_total / 16) : 0; }

}  // namespace watch_slots_internal

inline WatchSlots::WatchSlots(int max_total, int max_per_user)
    : max_total_(std::max(1, max_total)),
      per_user_(watch_slots_internal::ShareOf(max_total_, max_per_user)),
      reserved_(watch_slots_internal::ReservedOf(max_total_)) {}

inline absl::StatusOr<WatchSlots::Slot> WatchSlots::Take(const std::string& owner,
                                                         const std::string& who, bool privileged) {
  absl::MutexLock lock(&mu_);
  if (total_ >= max_total_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("too many jobs being watched at once (max_watchers = ", max_total_,
                     "): poll with `overlapctl get` instead, or watch again later"));
  }
  if (privileged) {
    ++total_;
    return Slot(this, owner, true);
  }
  int& mine = by_owner_[owner];
  if (mine >= per_user_) {
    if (mine == 0) by_owner_.erase(owner);
    return absl::ResourceExhaustedError(absl::StrCat(
        "the watch share of ", who, " is full: ", mine, " watches open (max_watchers_per_user = ",
        per_user_, "): end one, or poll with `overlapctl get`"));
  }
  if (unprivileged_ >= max_total_ - reserved_) {
    if (mine == 0) by_owner_.erase(owner);
    return absl::ResourceExhaustedError(
        absl::StrCat("too many jobs being watched at once: users hold ", unprivileged_,
                     " of max_watchers = ", max_total_, ", the other ", reserved_,
                     " kept for admins: poll with `overlapctl get` instead, or watch again later"));
  }
  ++mine;
  ++unprivileged_;
  ++total_;
  return Slot(this, owner, false);
}

inline void WatchSlots::Release(const std::string& owner, bool privileged) {
  absl::MutexLock lock(&mu_);
  --total_;
  if (privileged) return;
  --unprivileged_;
  auto it = by_owner_.find(owner);
  if (it != by_owner_.end() && --it->second <= 0) by_owner_.erase(it);
}

inline WatchSlots::Slot::~Slot() {
  if (slots_ != nullptr) slots_->Release(owner_, privileged_);
}

}  // namespace overlap::rpc
