// The nonces of the peer tokens a daemon took, remembered for as long as the
// token could be taken (kPeerAuthWindow either side of its time), so that a
// token is good for one call: one recorded or replayed within the window is
// refused. Bounded: past `capacity` live nonces a new call is refused
// (RESOURCE_EXHAUSTED) rather than an old nonce forgotten, which would let its
// token be replayed.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace overlap::peer {

class NonceCache {
 public:
  NonceCache(size_t capacity, absl::Duration window) : capacity_(capacity), window_(window) {}

  // Records `nonce` of a token made at `token_time` (already verified to lie
  // within the window of `now`). UNAUTHENTICATED "replayed" when it was seen
  // before; RESOURCE_EXHAUSTED when `capacity` nonces are live.
  absl::Status Remember(const std::string& nonce, absl::Time token_time, absl::Time now);

  size_t size() const;

 private:
  void ForgetExpired(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t capacity_;
  const absl::Duration window_;
  mutable absl::Mutex mu_;
  std::map<std::string, absl::Time> expiry_of_ ABSL_GUARDED_BY(mu_);
  std::multimap<absl::Time, std::string> by_expiry_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap::peer
