// A session as the registry lists it (session_registry.h), for the Node
// service's ListSessions (server/wire/session_wire.h adds the lanes' figures).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/sessions/session.h"

namespace overlap::sessions {

// A session as ListSessions shows it (the lanes' figures are added there).
struct SessionRow {
  std::string id;
  std::string name;
  std::string owner;
  std::string owner_name;
  std::string state;  // joining | ready | failed | closed
  Priority priority = Priority::kCritical;
  int world = 0;
  int ranks_joined = 0;
  std::vector<int> devices;  // by rank
  int64_t mapped_bytes = 0;
  double deferred_bound_ms = 0;
  std::string error;
  absl::Time opened_at;
};

}  // namespace overlap::sessions
