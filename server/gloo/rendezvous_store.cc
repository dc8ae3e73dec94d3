#include "server/gloo/rendezvous_store.h"

#include "absl/strings/str_cat.h"

namespace overlap::gloo_group {

absl::Status InMemoryRendezvousStore::Set(const std::string& key, const std::string& value) {
  absl::MutexLock lock(&mu_);
  values_[key] = value;
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryRendezvousStore::Get(const std::string& key,
                                                         absl::Duration timeout) {
  auto is_set = [this, &key]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return values_.count(key) != 0; };
  absl::MutexLock lock(&mu_);
  // AwaitWithTimeout releases mu_ while it waits, so Set() from the other ranks
  // is never blocked by a rank that is waiting.
  if (!mu_.AwaitWithTimeout(absl::Condition(&is_set), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "rendezvous key '", key, "' was not set within ", absl::FormatDuration(timeout)));
  }
  return values_.at(key);
}

void InMemoryRendezvousStore::Clear() {
  absl::MutexLock lock(&mu_);
  values_.clear();
}

size_t InMemoryRendezvousStore::size() const {
  absl::MutexLock lock(&mu_);
  return values_.size();
}

}  // namespace overlap::gloo_group
