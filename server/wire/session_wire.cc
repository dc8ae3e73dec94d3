#include "server/wire/session_wire.h"

#include "absl/time/time.h"
#include "server/wire/same_name_fields.h"

// clang-format off
#define SESSION_OP_FIELDS(F)                                                          \
  F(op) F(steps) F(median_ms) F(hidden_share) F(lane_wait_ms) F(chunks) F(chunks_forced) \
  F(max_delay_ms) F(last_ms) F(device_ms_total) F(timed_steps) F(over_bound)
#define LANE_INTERVAL_FIELDS(F)                                                       \
  F(session_id) F(op) F(device) F(chunk) F(start_ms) F(end_ms) F(forced) F(seq)
// clang-format on

namespace overlap::wire {

v1::SessionInfo ToSessionInfo(const sessions::SessionRow& row,
                              const sessions::SessionFigures* figures) {
  v1::SessionInfo info;
  info.set_session_id(row.id);
  info.set_name(row.name);
  info.set_owner(row.owner_name.empty() ? row.owner : row.owner_name + " (" + row.owner + ")");
  info.set_state(row.state);
  info.set_priority(row.priority == sessions::Priority::kDeferred ? "deferred" : "critical");
  info.set_world(row.world);
  info.set_ranks_joined(row.ranks_joined);
  for (int device : row.devices) info.add_devices(device);
  info.set_mapped_bytes(row.mapped_bytes);
  info.set_deferred_bound_ms(row.deferred_bound_ms);
  info.set_error(row.error);
  info.set_opened_at(absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", row.opened_at, absl::UTCTimeZone()));
  if (figures != nullptr) {
    info.set_steps(figures->steps);
    info.set_enqueue_p50_us(figures->enqueue_p50_us);
    info.set_enqueue_p99_us(figures->enqueue_p99_us);
    if (figures->failed && row.state == "ready") info.set_state("failed");
    if (info.error().empty()) info.set_error(figures->error);
    for (const sessions::SessionOpFigures& in : figures->ops) {
      v1::SessionOpStats& out = *info.add_ops();
      SESSION_OP_FIELDS(WIRE_SET)
    }
  }
  return info;
}

v1::LaneInterval ToLaneInterval(const sessions::LaneInterval& interval) {
  const sessions::LaneInterval& in = interval;
  v1::LaneInterval out;
  LANE_INTERVAL_FIELDS(WIRE_SET)
  out.set_lane(interval.deferred ? "deferred" : "critical");
  return out;
}

v1::DeviceLaneState ToDeviceLaneState(const engine::DeviceLaneFigures& figures) {
  v1::DeviceLaneState out;
  out.set_device(figures.device);
  for (int u = 0; u < engine::kLaneUsers; ++u) {
    v1::LaneUserFigures& user = *out.add_users();
    user.set_user(engine::LaneUserName(static_cast<engine::LaneUser>(u)));
    user.set_critical_pending(figures.critical_pending[u]);
    user.set_critical_issued(figures.critical_issued[u]);
    user.set_deferred_sent(figures.deferred_sent[u]);
    user.set_deferred_yielded(figures.deferred_yielded[u]);
    user.set_deferred_over_bound(figures.deferred_over_bound[u]);
    user.set_deferred_yielded_to_other(figures.deferred_yielded_to_other[u]);
  }
  return out;
}

}  // namespace overlap::wire
