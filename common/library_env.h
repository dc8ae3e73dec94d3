// The environment variables that change how NCCL and CUDA behave (NCCL_*,
// CUDA_*), as this process sees them: results record them so that a run can
// be reproduced, and two runs compared.
#pragma once

#include <map>
#include <string>

namespace overlap {

// Name -> value of every NCCL_* and CUDA_* variable of this process's
// environment. Reads `environ`: call where no other thread changes it.
std::map<std::string, std::string> LibraryEnvironment();

}  // namespace overlap
