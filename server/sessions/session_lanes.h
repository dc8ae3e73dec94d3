// SessionLanes: the node's critical and deferred lanes, shared by every
// session on a device. One thread takes the sessions' commands from their
// rings (woken by their doorbells), enqueues each op once every rank of its
// group has posted it, and marks it completed when the device says its
// outputs are ready. Collectives of critical sessions go on each device's
// critical lane (kComm streams); those of deferred sessions on its deferred
// lane (kDeferred streams, the deferred communicator), their all_reduces cut
// into chunks, each chunk yielding while a critical collective of any
// session is queued or running on one of its devices, unless its bound is
// near (then it goes and is counted forced), as scheduler: dynamic does
// inside one job (runner/deferred_dispatcher.h).
//
// Every engine call for sessions comes from this one thread, so the engine's
// rule (one thread at a time per device) holds among sessions; devices that
// sessions use are held against the job queue (session_socket.h asks first),
// except for jobs of priority_class deferred, which run beside sessions. With
// the node's DeviceLanes (engine/device_lanes.h), such a job shares the
// lanes: the lanes' engine calls take the devices' enqueue mutexes
// (engine/lane_shared_engine.h) as the job's do, sessions' critical
// collectives count as critical work there while pending, sessions' deferred
// chunks also yield to the job's pending critical collectives and pass the
// node's deferred gate before they go.
//
// "Queued" is as the lanes know it: a critical collective holds a device's
// deferred lane from when the lanes enqueue it until its end event completes
// (its wait for the client's inputs included). A session's commands run in
// its seq order, each on the streams of its lane (critical: every device's
// compute stream, deferred: its deferred stream), so sessions on one device
// share those streams in the order their commands became runnable. The
// parts: session_run.h (one session), lane_arbiter.h (which chunk goes),
// lane_devices.h (clock origins, events, the work on each device).
//
// While no critical session shares a device, its deferred lane takes a
// deferred session's chunks as soon as they are runnable: the lane's depth
// (LanesOptions::lane_ahead_ms) keeps room for critical work that may
// arrive, and with no critical session there it would only hold the chunks
// back until their bound and then send them all at once.
//
// A command whose inputs never come: on a backend whose waits fail at their
// deadline (the host's), the device reports DEADLINE_EXCEEDED and the lanes
// read the words to name the rank; where a wait cannot fail (CUDA), a rank
// whose stream is still short of its inputs wait 100 ms past the deadline is
// named. The session fails DEADLINE_EXCEEDED either way.
//
// Thread safety: every method from any thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/engine/device_lanes.h"
#include "server/engine/engine.h"
#include "server/sessions/session.h"

namespace overlap::sessions {

// What the lanes report of one session (for ListSessions, top, metrics).
struct SessionOpFigures {
  std::string op;
  int64_t steps = 0;          // commands that ran it, completed
  double median_ms = 0;       // device time on rank 0 (a deferred op: its chunks' sum), recent
  double hidden_share = -1;   // -1: not measured for sessions
  double lane_wait_ms = 0;    // deferred: time its chunks waited for critical work, summed
  int64_t chunks = 0;         // deferred: chunks issued
  int64_t chunks_forced = 0;  // of them, sent beside critical work at their bound
  // Of them, sent only because their bound was near (forced, or onto a full
  // lane); the rest went as soon as the lane let them.
  int64_t chunks_at_bound = 0;
  double max_delay_ms = 0;     // deferred: the longest from runnable to completed
  double last_ms = 0;          // device time of its last timed step on rank 0 (0: none yet)
  double device_ms_total = 0;  // device time of every timed step on rank 0, summed
  int64_t timed_steps = 0;     // the steps in device_ms_total
  int64_t over_bound = 0;      // deferred: steps completed later than the bound after runnable
};
struct SessionFigures {
  std::string id;
  bool failed = false;
  std::string error;
  int64_t steps = 0;  // commands completed on every rank
  std::vector<SessionOpFigures> ops;
  double enqueue_p50_us = 0;  // client call -> daemon enqueue, host time
  double enqueue_p99_us = 0;
  // Of it, client call -> the lanes' thread took the command (its wake-up);
  // the rest is the enqueue itself.
  double take_p50_us = 0;
  double take_p99_us = 0;
  // Commands the lanes' thread found while it polled the rings (after an
  // earlier post, within LanesOptions::spin), and those it took after a sleep
  // in epoll (woken by a doorbell, a request or its poll interval): the first
  // kind costs no wake-up.
  int64_t taken_polling = 0;
  int64_t taken_woken = 0;
  // Op pieces (a whole op, or a deferred chunk) enqueued as one replayed CUDA
  // graph each, and directly (LanesOptions::graphs).
  int64_t pieces_replayed = 0;
  int64_t pieces_direct = 0;
};
// A lane busy with a session's op (a critical op or a deferred chunk), in ms
// on the device's clock since a session first used the device.
struct LaneInterval {
  std::string session_id;
  std::string op;
  int device = 0;
  bool deferred = false;
  int chunk = 0;
  double start_ms = 0;
  double end_ms = 0;
  bool forced = false;
  uint64_t seq = 0;  // the command it ran for: the session's step
};

// The lanes' thread's name (/proc/self/task/*/comm), for tools and tests.
inline constexpr char kLanesThreadName[] = "session-lanes";

// How the lanes' thread watches the devices.
struct LanesOptions {
  // How often it looks at the devices while work of a session is on them;
  // with none, it sleeps until a doorbell or a call wakes it.
  absl::Duration poll_interval = absl::Microseconds(200);
  // How many chunks a device's deferred lane holds at once: this many ms of
  // their recent time on the device, at least 1 and at most
  // max_chunks_in_flight (a queued chunk cannot yield to critical work that
  // arrives after it). 0: one at a time. On a device without a critical
  // session, two poll intervals of chunks plus one, at least 2 and at most
  // max_chunks_in_flight: enough to keep the device busy between the
  // thread's looks, few enough that a critical session opening finds little
  // ahead of it.
  double lane_ahead_ms = 0.25;
  int max_chunks_in_flight = 8;
  // How long after a rank last posted the thread polls the rings (and, at
  // poll_interval, the devices) without sleeping, so that the next command
  // is taken within a microsecond rather than after a wake-up from epoll (on
  // an idle core, or a virtual machine's halted vCPU, 100 us and more). It
  // keeps one core busy while sessions post, yielding it to any other thread
  // that wants it. A window longer than a training step keeps the thread
  // polling through the gaps between steps. The daemon sets it from
  // session_poll_ms (100 ms by default; 0: never poll). Unset: 5 ms where
  // the engine's devices are GPUs (HostWork() is null), none on the host
  // backend.
  std::optional<absl::Duration> spin;
  // Replay each op of a session as a CUDA graph from its second run on, where
  // the engine captures graphs and the op's ranks sit on one device
  // (piece_graphs.h): one launch per op instead of a call per GEMM, kernel
  // and copy. The daemon sets it from session_graphs.
  bool graphs = true;
};

class SessionLanes {
 public:
  // `engine` must outlive the lanes and have SharedMemory (Engine::Shared):
  // FAILED_PRECONDITION otherwise.
  // `node`, where given, must outlive the lanes (null: sessions are the
  // devices' only users).
  static absl::StatusOr<std::unique_ptr<SessionLanes>> Start(engine::Engine& engine,
                                                             LanesOptions options = {},
                                                             engine::DeviceLanes* node = nullptr);
  ~SessionLanes();  // ends every session (CANCELLED) and stops the thread

  // Runs `session` from now on. Its rings' failed_code stays 0 while it runs.
  // Returns once the lanes' thread made its ops' contexts: INVALID_ARGUMENT
  // for a setup that does not match its graph, ALREADY_EXISTS for an id the
  // lanes run, RESOURCE_EXHAUSTED when the contexts do not fit; on an error
  // the session never ran (OnEnded is not called) and what it held (imported
  // buffers, ring mapping, fds) is released. Never from an OnEnded callback.
  absl::Status Add(SessionSetup session);
  // Ends a session: its pending and later commands fail with `code` and
  // `why` (written to each ring's failed_code and failed_message, doorbells
  // rung), its contexts and imported buffers are released once the device is
  // done with them, and it leaves the lanes. `rank` >= 0 names the rank
  // whose end caused it (the message says so: "rank 1: ..." unless `why`
  // starts with "rank 1"). NOT_FOUND for an unknown id or one that has
  // already left the lanes. A session that failed by itself (a desync, a
  // step past its timeout) keeps its own code and message.
  absl::Status End(const std::string& id, absl::StatusCode code, const std::string& why,
                   int rank = -1);
  // A rank leaves on purpose (its client closed the session): the session
  // ends CANCELLED with `why` when every command its ranks posted has
  // completed, else as End with UNAVAILABLE, naming the first command not
  // completed. NOT_FOUND as End.
  absl::Status Close(const std::string& id, const std::string& why);
  // Called when a session has left the lanes for good (after End, or a
  // failure the lanes found themselves: a step past its timeout, a desync),
  // with how it ended (the first cause; CANCELLED for a clean Close): the
  // socket releases its quota and device hold.
  void OnEnded(std::function<void(const std::string& id, const absl::Status& ended)> callback);

  // The sessions in the lanes, then the last few that left them (failed,
  // with why, or ended), oldest first.
  std::vector<SessionFigures> Figures() const;
  // The last `max` lane intervals, oldest first.
  std::vector<LaneInterval> RecentIntervals(size_t max = 4096) const;
  // The node's lanes per device (sessions' and jobs' critical work, deferred
  // chunks sent, yielded and over bound); empty without the node's lanes.
  std::vector<engine::DeviceLaneFigures> DeviceFigures() const;

 private:
  struct State;
  explicit SessionLanes(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace overlap::sessions
