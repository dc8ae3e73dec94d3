// The job report's energy lines: each op's and the layer step's joules per
// step and average power, beside the same work run serially (the layer: its
// ops op by op), and the note where overlap saved time but drew more power
// (server/runner/energy.h).
#pragma once

#include <string>

#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

// "" where no op was metered (the host backend without a simulated counter).
std::string FormatEnergy(const v1::JobResult& result);

}  // namespace overlap::client
