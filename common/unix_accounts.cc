#include "common/unix_accounts.h"

#include <grp.h>
#include <pwd.h>

#include <cstddef>
#include <vector>

namespace overlap {
namespace {

// One getpwuid_r-style lookup into `entry`, whose strings point into `buffer`.
template <typename Entry, typename Id>
const Entry* Lookup(int (*lookup)(Id, Entry*, char*, size_t, Entry**), Id id, Entry& entry,
                    std::vector<char>& buffer) {
  buffer.resize(16384);
  Entry* found = nullptr;
  if (lookup(id, &entry, buffer.data(), buffer.size(), &found) != 0) return nullptr;
  return found;
}

}  // namespace

std::optional<UnixUser> LookupUser(uid_t uid) {
  passwd entry{};
  std::vector<char> buffer;
  const passwd* found = Lookup(::getpwuid_r, uid, entry, buffer);
  return found != nullptr ? std::optional<UnixUser>({found->pw_name, found->pw_gid}) : std::nullopt;
}

std::optional<std::string> LookupGroupName(gid_t gid) {
  group entry{};
  std::vector<char> buffer;
  const group* found = Lookup(::getgrgid_r, gid, entry, buffer);
  return found != nullptr ? std::optional<std::string>(found->gr_name) : std::nullopt;
}

}  // namespace overlap
