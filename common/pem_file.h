// Reading the PEM files of TLS settings (overlapd's tls_* keys, overlapctl's
// --tls-* flags), with errors that name the setting and the file.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace overlap {

// The text of the PEM file at `path`, which must hold at least one block whose
// label ends with `label` ("CERTIFICATE", "PRIVATE KEY"). INVALID_ARGUMENT
// naming `setting` (e.g. "tls_cert") when the file cannot be read or holds no
// such block.
absl::StatusOr<std::string> ReadPemFile(const std::string& path, absl::string_view setting,
                                        absl::string_view label);

}  // namespace overlap
