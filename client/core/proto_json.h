// overlapctl's one JSON form of the daemon's messages, for every --json: the
// protobuf JSON mapping (proto field names, every field printed) with two
// changes that scripts and jq expect. 64-bit integers are JSON numbers (the
// mapping writes them as strings so that JavaScript loses no digits; JSON
// itself has no such limit, and every other overlapctl output writes numbers).
// Unix-millisecond times (fields ending in _time_ms or _unix_ms) are joined by
// the same instant in RFC 3339 (UTC, milliseconds), under the name without
// "_ms" ("submit_time") or with "_unix_ms" made "_time" ("last_xid_time");
// null where the time is 0 (not yet).
#pragma once

#include <string>

#include "google/protobuf/message.h"
#include "nlohmann/json.hpp"

namespace overlap::client {

nlohmann::json ProtoToJson(const google::protobuf::Message& message);

// A unix millisecond time as RFC 3339 in UTC, "2026-12-06T08:17:42.123Z".
std::string Rfc3339(int64_t unix_ms);

}  // namespace overlap::client
