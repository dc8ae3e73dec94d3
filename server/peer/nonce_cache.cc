#include "server/peer/nonce_cache.h"

#include "absl/strings/str_cat.h"

namespace overlap::peer {

absl::Status NonceCache::Remember(const std::string& nonce, absl::Time token_time, absl::Time now) {
  absl::MutexLock lock(&mu_);
  ForgetExpired(now);
  if (expiry_of_.count(nonce) != 0) {
    return absl::UnauthenticatedError(
        "the call's token was replayed: its nonce was taken before, within the token's window");
  }
  if (expiry_of_.size() >= capacity_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this daemon took ", capacity_, " peer calls within ", absl::FormatDuration(window_),
        "; it remembers each call's nonce that long (to refuse replays): try again shortly"));
  }
  // A token is taken until window_ past its time; its nonce is kept as long.
  const absl::Time expiry = token_time + window_;
  expiry_of_.emplace(nonce, expiry);
  by_expiry_.emplace(expiry, nonce);
  return absl::OkStatus();
}

size_t NonceCache::size() const {
  absl::MutexLock lock(&mu_);
  return expiry_of_.size();
}

void NonceCache::ForgetExpired(absl::Time now) {
  while (!by_expiry_.empty() && by_expiry_.begin()->first < now) {
    expiry_of_.erase(by_expiry_.begin()->second);
    by_expiry_.erase(by_expiry_.begin());
  }
}

}  // namespace overlap::peer
