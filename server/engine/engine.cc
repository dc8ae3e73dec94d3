#include "server/engine/engine.h"

#include <cmath>
#include <vector>

#include "common/status_macros.h"

namespace overlap::engine {

absl::StatusOr<int64_t> Engine::FirstNonFinite(BufferRef src, DType dtype, int device) {
  std::vector<uint8_t> host(src.bytes);
  RETURN_IF_ERROR(CopyToHost(host.data(), src, device));
  const int64_t count = static_cast<int64_t>(src.bytes / DTypeSize(dtype));
  for (int64_t i = 0; i < count; ++i) {
    if (!std::isfinite(LoadAsFloat(host.data(), dtype, static_cast<size_t>(i)))) return i;
  }
  return -1;
}

}  // namespace overlap::engine
