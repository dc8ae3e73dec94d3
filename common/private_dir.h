// The per-user socket directory, /tmp/overlapd-UID, used when a user has no
// XDG_RUNTIME_DIR. /tmp is writable by everyone, so another local user can
// make that directory first and put their own socket in it: a daemon would
// then listen where that user can replace its socket, and a client would send
// its specs to whoever answers. Both check the directory before using it.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace overlap {

// "/tmp/overlapd-UID".
std::string FallbackSocketDir(unsigned uid);

// OK when `dir` is a directory (not a symlink to one) owned by `uid` that
// neither its group nor others may write; PERMISSION_DENIED naming the owner
// and mode, and what to do, otherwise. `who` starts the message ("listen",
// "--addr").
absl::Status CheckPrivateDir(const std::string& dir, unsigned uid, const std::string& who);

// Makes `dir` 0700 when it is missing, then CheckPrivateDir.
absl::Status MakePrivateDir(const std::string& dir, unsigned uid, const std::string& who);

}  // namespace overlap
