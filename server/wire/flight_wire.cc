#include "server/wire/flight_wire.h"

#include "server/wire/peer_wire.h"

namespace overlap::wire {
namespace {

flight::Lane LaneFrom(const std::string& name) {
  return name == flight::LaneName(flight::Lane::kDeferred) ? flight::Lane::kDeferred
                                                           : flight::Lane::kCritical;
}

flight::FlightState StateFrom(const std::string& name) {
  for (flight::FlightState state : {flight::FlightState::kFinished, flight::FlightState::kFailed,
                                    flight::FlightState::kAborted}) {
    if (name == flight::StateName(state)) return state;
  }
  return flight::FlightState::kEnqueued;
}

}  // namespace

v1::FlightRing ToProto(const flight::RankRing& ring) {
  v1::FlightRing out;
  out.set_rank(ring.rank);
  out.set_comm(ring.comm);
  out.set_lane(flight::LaneName(ring.lane));
  out.set_node(ring.node);
  for (const flight::FlightEntry& entry : ring.entries) {
    v1::FlightEntry* e = out.add_entries();
    e->set_seq(entry.seq);
    e->set_op(entry.op);
    for (int rank : entry.group) e->add_group(rank);
    e->set_bytes(entry.bytes);
    e->set_dtype(entry.dtype);
    e->set_job(entry.job);
    e->set_job_op(entry.job_op);
    e->set_state(flight::StateName(entry.state));
    e->set_enqueued_unix_ns(entry.enqueued_ns);
    e->set_finished_unix_ns(entry.finished_ns);
    e->set_error(entry.error);
  }
  return out;
}

flight::RankRing FromProto(const v1::FlightRing& ring) {
  flight::RankRing out;
  out.rank = ring.rank();
  out.comm = ring.comm();
  out.lane = LaneFrom(ring.lane());
  out.node = ring.node();
  out.entries.reserve(ring.entries_size());
  for (const v1::FlightEntry& e : ring.entries()) {
    flight::FlightEntry entry;
    entry.seq = e.seq();
    entry.op = e.op();
    entry.group.assign(e.group().begin(), e.group().end());
    entry.bytes = e.bytes();
    entry.dtype = e.dtype();
    entry.lane = out.lane;
    entry.job = e.job();
    entry.job_op = e.job_op();
    entry.state = StateFrom(e.state());
    entry.enqueued_ns = e.enqueued_unix_ns();
    entry.finished_ns = e.finished_unix_ns();
    // A peer's error is cut as this daemon cuts its own: rings stay bounded.
    entry.error = e.error().substr(0, flight::kMaxFlightErrorBytes);
    out.entries.push_back(std::move(entry));
  }
  return out;
}

v1::GetPartFlightRequest ToProto(const peer::FlightRequest& request) {
  v1::GetPartFlightRequest out;
  *out.mutable_global_id() = ToProto(request.global_id);
  return out;
}

peer::FlightRequest FromProto(const v1::GetPartFlightRequest& request) {
  return peer::FlightRequest{FromProto(request.global_id())};
}

v1::GetPartFlightResponse ToProto(const peer::PartFlight& flight) {
  v1::GetPartFlightResponse out;
  for (const flight::RankRing& ring : flight.rings) *out.add_rings() = ToProto(ring);
  out.set_truncated(flight.truncated);
  return out;
}

peer::PartFlight FromProto(const v1::GetPartFlightResponse& response) {
  peer::PartFlight out;
  out.rings.reserve(response.rings_size());
  for (const v1::FlightRing& ring : response.rings()) out.rings.push_back(FromProto(ring));
  out.truncated = response.truncated();
  return out;
}

}  // namespace overlap::wire
