// LaneDevices: what the lanes keep per device for every session at once: a
// clock origin (an event recorded when a session first uses the device, which
// every lane interval there is timed from), a pool of events to bracket work with, and the
// spans of work still on the device, from which the arbiter learns whether a
// critical collective is pending on a device and how many chunks its deferred
// lane holds.
//
// Thread safety: none; the lanes' thread owns it.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/device_lanes.h"
#include "server/engine/engine.h"
#include "server/sessions/session_lanes.h"

namespace overlap::sessions {

// One rank's part of a critical op or of a deferred chunk, bracketed by two
// events on the stream it runs on.
struct LaneSpan {
  LaneInterval interval;  // start_ms and end_ms filled once its end completes
  uint64_t session = 0;   // the lanes' key of the session
  uint64_t seq = 0;       // the command
  int op_index = 0;
  bool timed = false;                // session rank 0's: its time is the op's figure
  bool last_chunk = true;            // the op's last piece in this command
  bool critical_collective = false;  // holds the deferred lane back while pending
  bool read = false;                 // its times were read (Collect)
  engine::EventId start = engine::kNoEvent;
  engine::EventId end = engine::kNoEvent;
};

class LaneDevices {
 public:
  // With `node` (the node's lanes, shared with jobs beside sessions), a
  // critical collective's span also counts there while pending.
  explicit LaneDevices(engine::Engine& engine, engine::DeviceLanes* node = nullptr)
      : engine_(engine), node_(node) {}
  ~LaneDevices();
  LaneDevices(const LaneDevices&) = delete;
  LaneDevices& operator=(const LaneDevices&) = delete;

  // Records `device`'s origin on its compute stream the first time a
  // session uses it (the device is the lanes' from then on), and makes its
  // comm and deferred streams wait for it, so that no work of the lanes
  // there starts before it. No host thread waits.
  absl::Status Use(int device);

  // An event of `device` from the pool (created when the pool is empty).
  absl::StatusOr<engine::EventId> Take(int device);
  void Give(int device, engine::EventId event);

  // Work enqueued: pending until its end event completes.
  void Track(LaneSpan span);
  // The spans whose end completed, timed on their device's clock; their
  // events go back to the pool. A span whose times cannot be read (its
  // stream failed) comes back unread.
  std::vector<LaneSpan> Collect();

  // A critical collective's span is pending on `device`, or one ended there
  // less than a quiet window ago: about a deferred chunk's recent time there
  // (0.2 to 5 ms). A client that posts its steps ahead leaves gaps of tens of
  // microseconds between them, while it learns of one command's end and
  // posts the next; a chunk started in such a gap (a 1.5 ms GEMM) holds the
  // SMs the next critical step needs (on an H100 a critical step beside a
  // deferred stream ran 7-13% slower). The window lets only gaps longer than
  // a chunk take one.
  bool CriticalPending(int device) const;
  int DeferredInFlight(int device) const;
  // A recent deferred chunk's time on `device` (ms), 0 before the first.
  double ChunkMs(int device) const;
  bool Busy() const { return !spans_.empty(); }

 private:
  engine::Engine& engine_;
  engine::DeviceLanes* const node_;  // null: the lanes are the devices' only user
  std::map<int, engine::EventId> origin_;
  std::map<int, std::vector<engine::EventId>> free_;
  std::vector<engine::EventId> created_;
  std::list<LaneSpan> spans_;
  std::map<int, int> critical_pending_;  // by device: critical collective spans pending
  std::map<int, int64_t> critical_quiet_from_ns_;  // by device: the quiet window's end (steady clock)
  std::map<int, int> deferred_in_flight_;
  std::map<int, double> chunk_ms_;
};

}  // namespace overlap::sessions
