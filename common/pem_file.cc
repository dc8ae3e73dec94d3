#include "common/pem_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace overlap {

absl::StatusOr<std::string> ReadPemFile(const std::string& path, absl::string_view setting,
                                        absl::string_view label) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(setting, ": cannot read ", path, ": ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  const std::string pem = text.str();
  // "-----BEGIN CERTIFICATE-----", "-----BEGIN RSA PRIVATE KEY-----", ...
  const bool has_block =
      absl::StrContains(pem, "-----BEGIN ") && absl::StrContains(pem, absl::StrCat(label, "-----"));
  if (!has_block) {
    return absl::InvalidArgumentError(absl::StrCat(setting, ": ", path, " holds no PEM ", label));
  }
  return pem;
}

}  // namespace overlap
