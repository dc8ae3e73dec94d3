// `overlapctl flight JOB`: the flight recorder's rings of a job's collectives
// (v1::GetFlightResponse) as text: the verdict, then one table per rank and
// communicator, oldest collective first.
#pragma once

#include <string>

#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

std::string FormatFlight(const v1::GetFlightResponse& flight);

}  // namespace overlap::client
