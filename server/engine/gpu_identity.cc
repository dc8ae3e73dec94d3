#include "server/engine/gpu_identity.h"

#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"

namespace overlap::engine {

std::string FormatGpuUuid(const char (&bytes)[16]) {
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    absl::StrAppendFormat(&out, "%02x", static_cast<unsigned char>(bytes[i]));
  }
  return out;
}

std::string NvmlPciBusId(const std::string& cuda_form) {
  const size_t colon = cuda_form.find(':');
  if (colon == std::string::npos || colon == 0 || colon > 8) return cuda_form;
  for (size_t i = 0; i < colon; ++i) {
    if (!std::isxdigit(static_cast<unsigned char>(cuda_form[i]))) return cuda_form;
  }
  return absl::AsciiStrToUpper(std::string(8 - colon, '0') + cuda_form);
}

}  // namespace overlap::engine
