#include "server/gloo/rendezvous_store.h"

#include "absl/strings/str_cat.h"

namespace overlap::gloo_group {

absl::Status InMemoryRendezvousStore::Set(const std::string& key, const std::string& value) {
  if (key.empty() || key.size() > limits_.max_key_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous key of ", key.size(),
                                                   " bytes (1 to ", limits_.max_key_bytes, ")"));
  }
  if (value.size() > limits_.max_value_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("rendezvous value of ", value.size(),
                                                     " bytes is over the ",
                                                     limits_.max_value_bytes, " a key may hold"));
  }
  absl::MutexLock lock(&mu_);
  auto it = values_.find(key);
  const size_t replaced = it == values_.end() ? 0 : key.size() + it->second.size();
  const size_t total = total_bytes_ - replaced + key.size() + value.size();
  if (total > limits_.max_total_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the job's rendezvous store would hold ", total, " bytes, over its ",
        limits_.max_total_bytes));
  }
  values_[key] = value;
  total_bytes_ = total;
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
  total_bytes_ = 0;
}

size_t InMemoryRendezvousStore::size() const {
  absl::MutexLock lock(&mu_);
  return values_.size();
}

}  // namespace overlap::gloo_group
