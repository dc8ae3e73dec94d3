// The environment variables that change how NCCL and CUDA behave (NCCL_*,
// CUDA_*), as this process sees them: results record them so that a run can
// be reproduced, and two runs compared.
#pragma once

#include <map>
#include <string>

#include "absl/synchronization/mutex.h"

namespace overlap {

// Name -> value of every NCCL_* and CUDA_* variable of this process's
// environment, read under a reader lock of EnvironmentMutex().
std::map<std::string, std::string> LibraryEnvironment();

// Held for writing by code that changes a library variable for a moment (the
// CUDA backend sets NCCL_ALGO while it creates a communicator pinned to an
// algorithm), so that readers never record the passing value.
absl::Mutex& EnvironmentMutex();

}  // namespace overlap
