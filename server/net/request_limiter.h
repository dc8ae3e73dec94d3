// How many requests the daemon works on at once: at most `max_total`, and at
// most `max_per_caller` for one caller (a user, a certificate, a peer node),
// so that one caller's flood cannot take every handler thread from the others.
// A request past either limit is refused at once (RESOURCE_EXHAUSTED) rather
// than queued, and counted. A request whose caller had gone by the time it was
// answered (cancelled, or past its deadline) is counted and logged as
// abandoned: work nobody waited for is what a stuck handler looks like.
//
// Thread safety: every method from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace grpc {
class ServerContext;
}

namespace overlap::net {

struct RequestLimits {
  int max_total = 64;
  int max_per_caller = 16;
};

class RequestLimiter {
 public:
  // `refused` and `abandoned` count what their names say; they must outlive
  // the limiter. `what` names the port in messages ("the user socket").
  RequestLimiter(RequestLimits limits, std::string what, std::atomic<int64_t>& refused,
                 std::atomic<int64_t>& abandoned)
      : limits_(limits), what_(std::move(what)), refused_(refused), abandoned_(abandoned) {}

  // A request in flight while it lives.
  class Ticket {
   public:
    Ticket(Ticket&& other) noexcept : limiter_(other.limiter_), caller_(std::move(other.caller_)) {
      other.limiter_ = nullptr;
    }
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    Ticket& operator=(Ticket&&) = delete;
    ~Ticket();

   private:
    friend class RequestLimiter;
    Ticket(RequestLimiter* limiter, std::string caller)
        : limiter_(limiter), caller_(std::move(caller)) {}
    RequestLimiter* limiter_;
    std::string caller_;
  };

  // A ticket for one more request from `caller`, or RESOURCE_EXHAUSTED saying
  // which limit it met.
  absl::StatusOr<Ticket> Enter(const std::string& caller);

  // Counts and logs `method` from `caller` as abandoned when its context says
  // the caller is gone; call when the handler is done.
  void NoteIfAbandoned(const grpc::ServerContext& context, absl::string_view method,
                       absl::string_view caller, absl::Time started);

  int in_flight() const;

 private:
  void Leave(const std::string& caller);

  const RequestLimits limits_;
  const std::string what_;
  std::atomic<int64_t>& refused_;
  std::atomic<int64_t>& abandoned_;
  mutable absl::Mutex mu_;
  int total_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int> per_caller_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap::net
