// `timeline --html FILE`: each op's traced iteration as a Gantt chart, a lane
// per rank and stream, in a self-contained page.
#pragma once

#include <string>

#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

// "" when the job (or `op_id`) has no timeline.
std::string TimelineHtml(const v1::Job& job, const std::string& op_id);

}  // namespace overlap::client
