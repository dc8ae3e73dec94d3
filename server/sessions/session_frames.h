// The session socket's frames (proto/overlap/v1/session.proto) to and from
// the registry's plain types: the socket's one place that reads or fills a
// session message.
#pragma once

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "overlap/v1/session.pb.h"
#include "server/engine/engine.h"
#include "server/sessions/session_registry.h"

namespace overlap::sessions {

// The daemon's settings a request's zeros stand for.
struct OpenDefaults {
  absl::Duration join_timeout;
  absl::Duration step_timeout;
  double deferred_bound_ms = 20;
};

// The request with its defaults filled in, and the rank's join timeout (the
// daemon's, or less when it asks). INVALID_ARGUMENT naming the field for an
// empty or long name, an unknown priority, or a negative number.
absl::StatusOr<OpenRequest> OpenRequestFrom(const v1::OpenSessionRequest& request,
                                            const OpenDefaults& defaults,
                                            absl::Duration* join_timeout);

// The answer to a rank that joined (its fds travel beside it).
v1::SessionFrame OpenReplyFrame(const SessionRegistry::Joined& joined,
                                const engine::Engine& engine);

// Whether `tensor` is one a rank registers (X, W, Y or SIGNALS).
bool ValidTensor(int tensor);

}  // namespace overlap::sessions
