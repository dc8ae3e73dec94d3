// Why a job waits or ended, as one word for a table cell (a list's REASON):
// awk splits the columns, so the cell is a short slug and the whole text stays
// in the job's `waiting` and `error` fields (`get`, -o json) and in the note
// lines `list -o wide` prints under its table. Pure formatting, no I/O.
#pragma once

#include <string>

#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

// A queued job's wait, else a failed, cancelled or aborted job's error, as a
// slug: "session-holds-dev0", "job-holds-dev1", "job-ahead-dev0",
// "memory-short-dev0", "daemon-restarted", "data-loss"; "-" for none.
std::string ReasonSlug(const v1::Job& job);

// The whole text the slug stands for (its first line); "" for none.
std::string ReasonText(const v1::Job& job);

}  // namespace overlap::client
