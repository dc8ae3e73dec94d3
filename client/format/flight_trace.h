// The flight recorder's rings in a Chrome trace (`overlapctl timeline JOB
// --output-file F --flight`, and by default when they are small): one
// "flight" track per rank, each collective a complete event from enqueued to
// finished (an instant where it never finished), named by its seq and op.
// The rings keep wall-clock times: the track starts at the oldest entry shown.
#pragma once

#include <cstdint>
#include <string>

#include "nlohmann/json.hpp"
#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

// Rings of at most this many entries in all go into a trace without --flight.
inline constexpr int64_t kSmallFlightEntries = 20000;

int64_t FlightEntryCount(const v1::GetFlightResponse& flight);

// Adds the rings' events to `trace` (ChromeTrace's object: its "traceEvents");
// with `op_id`, only the collectives that served that op. Each event's args
// name its seq, collective, lane, communicator, state, bytes, op and node.
void AppendFlightTrace(const v1::GetFlightResponse& flight, const std::string& op_id,
                       nlohmann::json& trace);

}  // namespace overlap::client
