// `overlapctl pin ID`: a finished job's graph with every op's mode, chunks and
// transport set to the schedule it ran (what auto chose, or what was asked),
// as YAML. Submitted again, here or on another node, its ops run those
// schedules without autotune: tune once, pin, and run the same schedules
// everywhere, or edit one op to try another.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

// FAILED_PRECONDITION when the job ran no op to the end (nothing to pin);
// INVALID_ARGUMENT when its stored graph no longer parses. Ops without a result
// (the job failed or was cancelled before them) stay as written, and a comment
// at the top names them.
absl::StatusOr<std::string> PinnedGraph(const v1::Job& job);

}  // namespace overlap::client
