#include "server/net/request_limiter.h"

#include <grpcpp/server_context.h>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/text.h"

namespace overlap::net {

RequestLimiter::Ticket::~Ticket() {
  if (limiter_ != nullptr) limiter_->Leave(caller_);
}

absl::StatusOr<RequestLimiter::Ticket> RequestLimiter::Enter(const std::string& caller) {
  {
    absl::MutexLock lock(&mu_);
    int& mine = per_caller_[caller];
    if (total_ < limits_.max_total && mine < limits_.max_per_caller) {
      ++total_;
      ++mine;
      return Ticket(this, caller);
    }
    if (mine == 0) per_caller_.erase(caller);
  }
  refused_.fetch_add(1);
  // Past a limit: the caller may be flooding, so no log line per request here
  // (the counter says how many); the message says which limit.
  return absl::ResourceExhaustedError(absl::StrCat(
      "too many requests in flight on ", what_, " (at most ", limits_.max_total, " in all and ",
      limits_.max_per_caller, " from ", Excerpt(caller, 100),
      ": max_requests_in_flight, max_requests_per_user); try again"));
}

void RequestLimiter::Leave(const std::string& caller) {
  absl::MutexLock lock(&mu_);
  --total_;
  auto it = per_caller_.find(caller);
  if (it != per_caller_.end() && --it->second <= 0) per_caller_.erase(it);
}

int RequestLimiter::in_flight() const {
  absl::MutexLock lock(&mu_);
  return total_;
}

void RequestLimiter::NoteIfAbandoned(const grpc::ServerContext& context, absl::string_view method,
                                     absl::string_view caller, absl::Time started) {
  if (!context.IsCancelled()) return;
  abandoned_.fetch_add(1);
  GetLogger("rpc")->warn("{} from {} on {} was abandoned by its caller (cancelled or past its "
                         "deadline) after {}: nobody got its answer",
                         std::string(method), Excerpt(caller, 100), what_,
                         absl::FormatDuration(absl::Now() - started));
}

}  // namespace overlap::net
