// The user and group database (passwd, group: files, LDAP, whatever NSS is
// set to) by id, through the reentrant calls. Thread-safe; each call may block
// on NSS.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace overlap {

struct UnixUser {
  std::string name;
  gid_t gid = 0;  // the primary group
};

// nullopt when no account has this id, or the lookup failed.
std::optional<UnixUser> LookupUser(uid_t uid);
std::optional<std::string> LookupGroupName(gid_t gid);

}  // namespace overlap
