// How much memory the parses running at once may take together: a semaphore
// counted in bytes. Each parse asks for what the pre-scan estimates it will
// take (EstimatedParseBytes) before yaml-cpp builds anything, and gives it
// back when done; a parse that does not fit waits up to `max_wait`, then is
// refused RESOURCE_EXHAUSTED, so that many large specs sent at once (by one
// user or several, on the user socket or the peer port) cannot add up to
// more than `capacity_bytes` of parsing.
//
// Thread-safe. A Grant releases on destruction, and there, outside the lock,
// hands the freed memory back to the system after a large parse (glibc keeps
// what a thread's arena freed otherwise, and the daemon's RSS would stay at
// its peak).
#pragma once

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace overlap {

class ParseBudget {
 public:
  ParseBudget(int64_t capacity_bytes, absl::Duration max_wait);
  ParseBudget(const ParseBudget&) = delete;
  ParseBudget& operator=(const ParseBudget&) = delete;

  // What one Acquire holds until it is destroyed; movable.
  class Grant {
   public:
    Grant() = default;
    Grant(Grant&& other) noexcept;
    Grant& operator=(Grant&& other) noexcept;
    ~Grant();

   private:
    friend class ParseBudget;
    Grant(ParseBudget* budget, int64_t bytes) : budget_(budget), bytes_(bytes) {}
    void Release();
    ParseBudget* budget_ = nullptr;
    int64_t bytes_ = 0;
  };

  // `bytes` (at most the capacity: a parse larger than the whole budget
  // waits to run alone) or RESOURCE_EXHAUSTED "the daemon is parsing too much
  // at once" after max_wait.
  absl::StatusOr<Grant> Acquire(int64_t bytes);

  int64_t capacity_bytes() const { return capacity_; }
  int64_t in_use_bytes() const;
  int64_t peak_bytes() const;  // the most ever held at once
  int64_t refused() const;     // Acquires refused

  // A budget for a daemon whose specs are at most `max_spec_bytes`: room for
  // two of the largest at once (EstimatedParseBytes of a spec that is all
  // values, ~120 MiB for 1 MiB), and at least 64 MiB. A graph of a few KiB
  // takes ~0.1 MiB of it: thousands of those fit.
  static int64_t CapacityFor(int64_t max_spec_bytes);

 private:
  void Release(int64_t bytes);

  const int64_t capacity_;
  const absl::Duration max_wait_;
  mutable absl::Mutex mu_;
  int64_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace overlap
