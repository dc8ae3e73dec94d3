// The flight recorder's rings on the wire: to the API (v1::GetFlightResponse,
// for `overlapctl flight`), and both ways on the peer port (GetPartFlight),
// where a coordinator reads its parts' rings.
//
// FromProto(ToProto(r)) equals r for every ring r (tests/wire/). Pure
// functions; thread-safe.
#pragma once

#include <vector>

#include "overlap/v1/overlap.pb.h"
#include "overlap/v1/peer.pb.h"
#include "server/flight/flight_entry.h"
#include "server/peer/part_calls.h"

namespace overlap::wire {

v1::FlightRing ToProto(const flight::RankRing& ring);
// A lane or state name it does not know reads as critical / enqueued: the
// rings are only ever judged and shown.
flight::RankRing FromProto(const v1::FlightRing& ring);

v1::GetPartFlightRequest ToProto(const peer::FlightRequest& request);
peer::FlightRequest FromProto(const v1::GetPartFlightRequest& request);
v1::GetPartFlightResponse ToProto(const peer::PartFlight& flight);
peer::PartFlight FromProto(const v1::GetPartFlightResponse& response);

}  // namespace overlap::wire
