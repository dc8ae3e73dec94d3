#include "server/wire/session_wire.h"

#include "absl/time/time.h"

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
    for (const sessions::SessionOpFigures& op : figures->ops) {
      v1::SessionOpStats& out = *info.add_ops();
      out.set_op(op.op);
      out.set_steps(op.steps);
      out.set_median_ms(op.median_ms);
      out.set_hidden_share(op.hidden_share);
      out.set_lane_wait_ms(op.lane_wait_ms);
      out.set_chunks(op.chunks);
      out.set_chunks_forced(op.chunks_forced);
      out.set_max_delay_ms(op.max_delay_ms);
      out.set_last_ms(op.last_ms);
      out.set_device_ms_total(op.device_ms_total);
      out.set_timed_steps(op.timed_steps);
      out.set_over_bound(op.over_bound);
    }
  }
  return info;
}

v1::LaneInterval ToLaneInterval(const sessions::LaneInterval& interval) {
  v1::LaneInterval out;
  out.set_session_id(interval.session_id);
  out.set_op(interval.op);
  out.set_device(interval.device);
  out.set_lane(interval.deferred ? "deferred" : "critical");
  out.set_chunk(interval.chunk);
  out.set_start_ms(interval.start_ms);
  out.set_end_ms(interval.end_ms);
  out.set_forced(interval.forced);
  out.set_seq(interval.seq);
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
