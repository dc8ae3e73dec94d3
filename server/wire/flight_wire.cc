#include "server/wire/flight_wire.h"

namespace overlap::wire {

v1::FlightRing ToProto(const flight::RankRing& ring) {
  v1::FlightRing out;
  out.set_rank(ring.rank);
  out.set_comm(ring.comm);
  out.set_lane(flight::LaneName(ring.lane));
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
  }
  return out;
}

}  // namespace overlap::wire
