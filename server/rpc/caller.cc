#include "server/rpc/caller.h"

#include <grp.h>
#include <grpcpp/server_context.h>
#include <unistd.h>

#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/unix_accounts.h"

namespace overlap::rpc {
namespace {

std::string UserName(uid_t uid) {
  std::optional<UnixUser> user = LookupUser(uid);
  return user ? user->name : absl::StrCat("uid ", uid);
}

// The certificate identity of a mutual-TLS peer: its subject, else its common
// name; empty without a client certificate.
std::string CertificateSubject(const grpc::ServerContext& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return "";
  for (const char* property : {"x509_subject", "x509_common_name"}) {
    for (const grpc::string_ref& value : auth->FindPropertyValues(property)) {
      if (value.size() > 0) return std::string(value.data(), value.size());
    }
  }
  return "";
}

}  // namespace

std::string Caller::Describe() const {
  return name == owner ? owner : absl::StrCat(name, " (", owner, ")");
}

bool CallerResolver::IsAdmin(uid_t uid) const {
  if (uid == 0) return true;
  if (admin_gid_ < 0) return false;
  std::optional<UnixUser> user = LookupUser(uid);
  if (!user) return false;
  if (user->gid == static_cast<gid_t>(admin_gid_)) return true;
  int count = 64;
  std::vector<gid_t> groups(count);
  if (::getgrouplist(user->name.c_str(), user->gid, groups.data(), &count) < 0) {
    groups.resize(count);
    if (::getgrouplist(user->name.c_str(), user->gid, groups.data(), &count) < 0) return false;
  }
  groups.resize(count);
  for (gid_t gid : groups) {
    if (gid == static_cast<gid_t>(admin_gid_)) return true;
  }
  return false;
}

absl::StatusOr<Caller> CallerResolver::Resolve(const grpc::ServerContext* context) const {
  if (context == nullptr) return Caller{"daemon", "daemon", true, false};
  if (context->client_metadata().count(kClaimedIdentityHeader) > 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "a call may not claim an identity (", kClaimedIdentityHeader,
        "): overlapd takes it from the connection, the unix socket's peer or the client "
        "certificate"));
  }
  Caller caller;
  if (unix_ != nullptr) {
    std::optional<PeerCredentials> peer = unix_->PeerOf(context->peer());
    if (!peer) {
      return absl::UnauthenticatedError("the unix socket's peer has no known credentials");
    }
    caller = Caller{absl::StrCat("uid:", peer->uid), UserName(peer->uid), IsAdmin(peer->uid),
                    peer->uid == ::geteuid()};
  } else if (std::string subject = CertificateSubject(*context); !subject.empty()) {
    caller = Caller{absl::StrCat("x509:", subject), subject, false, false};
  } else {
    caller = Caller{kAnonymous, kAnonymous, false, false};
  }
  // The connection may have closed, and its fd number been given to another,
  // before the identity was read: such a call is cancelled by then.
  if (context->IsCancelled()) return absl::CancelledError("the caller went away");
  return caller;
}

}  // namespace overlap::rpc
