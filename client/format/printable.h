// Jobs as the daemon stores them may hold names, ids and errors that were
// accepted before the daemon refused control characters, or that quote what a
// user wrote. Every job overlapctl receives passes through MakePrintable before
// anything prints it, so that no terminal escape, newline or megabyte-long
// name reaches the operator's terminal, in text or in --json.
#pragma once

#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

// Escapes control characters and bytes that are not UTF-8 (common/text.h,
// Excerpt) in every string of `job` that came from a user, and cuts the long
// ones. The spec is left as it is: it is only ever written back as a graph.
void MakePrintable(v1::Job* job);

}  // namespace overlap::client
