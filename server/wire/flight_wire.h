// The flight recorder's rings on the wire (v1::GetFlightResponse): one way,
// for `overlapctl flight`; nothing reads rings back from the API.
//
// Pure functions; thread-safe.
#pragma once

#include <vector>

#include "overlap/v1/overlap.pb.h"
#include "server/flight/flight_entry.h"

namespace overlap::wire {

v1::FlightRing ToProto(const flight::RankRing& ring);

}  // namespace overlap::wire
