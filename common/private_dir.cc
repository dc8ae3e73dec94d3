#include "common/private_dir.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace overlap {

std::string FallbackSocketDir(unsigned uid) { return absl::StrCat("/tmp/overlapd-", uid); }

absl::Status CheckPrivateDir(const std::string& dir, unsigned uid, const std::string& who) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, ": cannot use ", dir, ": ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::PermissionDeniedError(absl::StrCat(
        who, ": ", dir, " is not a directory", S_ISLNK(st.st_mode) ? " (a symlink)" : "",
        ": someone else may have made it; remove it, or set XDG_RUNTIME_DIR"));
  }
  if (st.st_uid != uid || (st.st_mode & 022) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s: refusing %s: it belongs to uid %d with mode %04o, and must belong to uid %d and be "
        "writable by no one else (another user could put their own socket there); remove it, "
        "or set XDG_RUNTIME_DIR",
        who, dir, st.st_uid, st.st_mode & 07777, uid));
  }
  return absl::OkStatus();
}

absl::Status MakePrivateDir(const std::string& dir, unsigned uid, const std::string& who) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, ": cannot create ", dir, ": ", std::strerror(errno)));
  }
  return CheckPrivateDir(dir, uid, who);
}

}  // namespace overlap
