// Who is calling, as the daemon knows it, never as the client says:
//   - over the unix socket, the uid the kernel reports for the connection
//     (SO_PEERCRED, unix_listener.h): owner "uid:1000", named after the user;
//   - over TCP with client certificates (mutual TLS), the certificate's
//     subject: owner "x509:CN=alice,O=acme";
//   - over plain TCP (loopback), "anonymous".
// Root, and the members of admin_group, are admins (unix socket only): they
// may cancel anyone's job and change node-wide state. The daemon's own uid is
// the socket's owner.
//
// Thread safety: Resolve from any thread.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "server/rpc/unix_listener.h"

namespace grpc {
class ServerContext;
}

namespace overlap::rpc {

inline constexpr char kAnonymous[] = "anonymous";
// A request header that claims an identity: refused, since identity comes
// from the connection.
inline constexpr char kClaimedIdentityHeader[] = "overlapd-user";

struct Caller {
  std::string owner;  // the stable key jobs are owned by
  std::string name;   // for people: "alice", a certificate's subject, "anonymous"
  bool admin = false;
  // Over the unix socket, the daemon's own uid, who owns the socket (watch
  // slots keep room for it as for admins: watch_slots.h).
  bool socket_owner = false;

  // "alice (uid:1000)", or the name where it is the owner.
  std::string Describe() const;
};

class CallerResolver {
 public:
  // `listener` may be null (the daemon listens on TCP); it must outlive the
  // resolver. `admin_gid` < 0: only root is an admin.
  CallerResolver(const UnixListener* listener, int admin_gid)
      : unix_(listener), admin_gid_(admin_gid) {}

  // The caller of the call `context` serves; null = the daemon itself (tests,
  // in-process callers), an admin. PERMISSION_DENIED for a call that claims
  // an identity (kClaimedIdentityHeader), UNAUTHENTICATED for a unix peer
  // whose credentials are unknown, CANCELLED for a call whose connection is
  // gone (its fd number may already name another connection).
  absl::StatusOr<Caller> Resolve(const grpc::ServerContext* context) const;

  // Whether `uid` is root or in the admin group.
  bool IsAdmin(uid_t uid) const;

 private:
  const UnixListener* const unix_;
  const int admin_gid_;
};

}  // namespace overlap::rpc
