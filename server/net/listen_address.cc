#include "server/net/listen_address.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/private_dir.h"
#include "common/status_macros.h"

namespace overlap::net {
namespace {

absl::Status Invalid(const std::string& listen, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("listen: \"", listen, "\": ", why));
}

bool IsLoopbackHost(const std::string& host) {
  if (absl::AsciiStrToLower(host) == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    // ::ffff:127.x.y.z is IPv4 loopback too.
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

}  // namespace

absl::StatusOr<ListenTarget> ResolveListenAddress(const std::string& listen,
                                                  bool allow_insecure_tcp,
                                                  bool clients_authenticated) {
  ListenTarget target;
  if (absl::StartsWith(listen, "unix:")) {
    std::string path = listen.substr(5);
    // unix:///abs/path is the URI spelling of unix:/abs/path.
    if (absl::StartsWith(path, "//")) path = path.substr(2);
    if (path.empty()) return Invalid(listen, "empty socket path");
    if (path.size() >= sizeof(sockaddr_un{}.sun_path)) {
      return Invalid(listen, absl::StrCat("socket path longer than ",
                                          sizeof(sockaddr_un{}.sun_path) - 1, " bytes"));
    }
    target.socket_path = path;
    target.grpc_uri = "unix:" + path;
    return target;
  }
  if (absl::StrContains(listen, "://") || absl::StartsWith(listen, "unix-abstract:")) {
    return Invalid(listen, "expected unix:PATH or host:port");
  }
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return Invalid(listen, "expected unix:PATH or host:port");
  std::string host = listen.substr(0, colon);
  const std::string port_text = listen.substr(colon + 1);
  int port = -1;
  if (!absl::SimpleAtoi(port_text, &port) || port < 0 || port > 65535) {
    return Invalid(listen, absl::StrCat("port must be 0..65535 (got \"", port_text, "\")"));
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (absl::StrContains(host, ':')) {
    return Invalid(listen, "write an IPv6 host in brackets, e.g. [::1]:50051");
  }
  if (host.empty()) return Invalid(listen, "empty host (use 127.0.0.1 for loopback)");
  if (!IsLoopbackHost(host) && !clients_authenticated) {
    if (!allow_insecure_tcp) {
      return Invalid(listen,
                     "not a loopback address, and clients are not authenticated: set "
                     "tls_cert, tls_key and tls_client_ca (mutual TLS) to listen on the "
                     "network, or allow_insecure_tcp (--allow-insecure-tcp) to do it anyway");
    }
    target.insecure_network = true;
  }
  target.grpc_uri = listen;
  return target;
}

absl::Status PrepareUnixSocketPath(const std::string& socket_path) {
  const std::filesystem::path path(socket_path);
  std::error_code ec;
  if (path.parent_path() == FallbackSocketDir(::geteuid())) {
    RETURN_IF_ERROR(MakePrivateDir(path.parent_path(), ::geteuid(), "listen"));
  } else if (path.has_parent_path() && !std::filesystem::exists(path.parent_path(), ec)) {
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat("listen: cannot create ", path.parent_path().string(), ": ", ec.message()));
    }
    ::chmod(path.parent_path().c_str(), 0755);
  }
  struct stat st {};
  if (::lstat(socket_path.c_str(), &st) != 0) return absl::OkStatus();  // nothing there
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("listen: ", socket_path, " exists and is not a socket"));
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket(): ", std::strerror(errno)));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof(addr.sun_path) - 1);
  const bool live = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  if (live) {
    return absl::FailedPreconditionError(
        absl::StrCat("listen: another process (overlapd?) is already listening on ", socket_path));
  }
  if (::unlink(socket_path.c_str()) != 0 && errno != ENOENT) {
    return absl::FailedPreconditionError(absl::StrCat("listen: cannot remove stale socket ",
                                                      socket_path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace overlap::net
