// A schedule: how one layer op overlaps its collective with its GEMM.
#pragma once

#include <string>
#include <vector>

#include "common/graph.h"

namespace overlap::ops {

struct Schedule {
  OverlapMode mode = OverlapMode::kSerial;  // never kAuto here: auto resolves to one of these
  int chunks = 1;                           // chunked only
  Transport transport = Transport::kNccl;   // never kAuto here

  std::string Name() const;  // e.g. "chunked/4/p2p"
  bool operator==(const Schedule& other) const {
    return mode == other.mode && chunks == other.chunks && transport == other.transport;
  }
};

// The schedules `auto` chooses among for `op` at degree `tp` (the mode and
// transport fields of `op` narrow the set when they are not auto). Serial with
// the NCCL transport is always first: it is the fallback. An explicit mode with
// transport auto still tunes the transport.
std::vector<Schedule> CandidateSchedules(const OpSpec& op, int tp);

}  // namespace overlap::ops
