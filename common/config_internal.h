// Testable forms of DefaultListenAddress() / DefaultStateDir(): the process's
// identity and environment come in as arguments. Not for use outside common/
// and its tests.
#pragma once

#include <functional>
#include <string>

namespace overlap {
namespace config_internal {

struct UserContext {
  bool root = false;
  unsigned uid = 0;
  std::function<const char*(const char*)> getenv;  // nullptr when the variable is unset
  std::string home_from_passwd;                    // used when HOME is unset
  // True when a unix socket is at the path (DefaultClientAddressFor).
  std::function<bool(const std::string&)> socket_exists;
};

UserContext CurrentUser();
std::string DefaultListenAddressFor(const UserContext& user);
std::string DefaultStateDirFor(const UserContext& user);
std::string DefaultClientAddressFor(const UserContext& user);

}  // namespace config_internal
}  // namespace overlap
