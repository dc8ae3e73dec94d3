// Test helper: a matcher for an op's auto_reason when autotune timed its
// candidates just now (not the tuning cache, not as requested).
#pragma once

#include <gmock/gmock.h>

namespace overlap {

// Which reason it is depends on timing: on the host backend, or any busy
// machine, a few microseconds decide whether overlap (or a pinned all-reduce
// layout) wins by the margin. Each is an autotune outcome.
inline auto IsFreshlyAutotuned() {
  using ::testing::StartsWith;
  return ::testing::AnyOf(StartsWith("autotuned over"), StartsWith("overlap does not pay"),
                          StartsWith("a pinned layout does not pay"));
}

}  // namespace overlap
