// What every fuzz target (tests/fuzz/*_fuzz.cc) shares: how an input that
// breaks a promise of the code under test stops the run. A refusal is never a
// failure (any input may be refused, with the code the contract names); a
// crash, a sanitizer report, a hang, runaway memory, an exception that
// escapes, or a FUZZ_CHECK that does not hold is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"

// Aborts, naming the rule: libFuzzer saves the input as a crash, and
// fuzz_replay_test fails on it.
#define FUZZ_CHECK(condition)                                                         \
  do {                                                                                \
    if (!(condition)) {                                                               \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__,      \
                   #condition);                                                       \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)

namespace overlap::fuzz {

inline std::string Text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace overlap::fuzz
