// Sessions as the Node service shows them: the registry's rows and the
// lanes' figures (server/sessions/) to overlap.v1's SessionInfo and
// LaneInterval.
#pragma once

#include "overlap/v1/overlap.pb.h"
#include "server/engine/device_lanes.h"
#include "server/sessions/session_lanes.h"
#include "server/sessions/session_row.h"

namespace overlap::wire {

// `figures` may be null (a session the lanes do not run, or no longer).
v1::SessionInfo ToSessionInfo(const sessions::SessionRow& row,
                              const sessions::SessionFigures* figures);
v1::LaneInterval ToLaneInterval(const sessions::LaneInterval& interval);
v1::DeviceLaneState ToDeviceLaneState(const engine::DeviceLaneFigures& figures);

}  // namespace overlap::wire
