// The sessions' Prometheus families (docs/OPERATIONS.md, "Prometheus"): how
// many each owner has open, and per open session its steps, each op's device
// time (a summary: the recent median, the sum and count of every step), lane
// waits, deferred chunks and steps past the bound, mapped bytes and the host
// time from a rank's call to the daemon's enqueue.
//
// Only open sessions (joining, ready) have series: an ended session's go away
// at the next scrape, so the series stay within session_max_per_owner per
// owner, times the graph's ops for the per-op ones. Built from the registry's
// rows and the lanes' figures, both copied under their own locks, so that the
// figures agree with `overlapctl sessions`.
#pragma once

#include <vector>

#include "prometheus/metric_family.h"
#include "server/engine/device_lanes.h"
#include "server/sessions/session_lanes.h"
#include "server/sessions/session_row.h"

namespace overlap::rpc {

// The families, each present (perhaps without samples) whatever the sessions.
std::vector<prometheus::MetricFamily> BuildSessionMetrics(
    const std::vector<sessions::SessionRow>& rows,
    const std::vector<sessions::SessionFigures>& figures);

// The node's lanes per device and user (`cuda_device`, `user`: session | job):
// critical work pending now and registered, deferred chunks sent, yielded
// and sent over their bound (engine/device_lanes.h). Empty without them.
std::vector<prometheus::MetricFamily> BuildDeviceLaneMetrics(
    const std::vector<engine::DeviceLaneFigures>& devices);

}  // namespace overlap::rpc
