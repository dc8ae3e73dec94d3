// SessionRun: one session inside the lanes (session_lanes.h): its ops'
// contexts over the client's tensors, the commands its ranks posted, and what
// each became on the devices. The lanes' thread drives it:
//
//   Take    reads the rings; a command every rank posted (the same op at the
//           same seq, or the session fails: a desync) starts: enqueued at
//           once for a critical session, handed to the arbiter for a
//           deferred one, whose chunks then go one grant at a time (Issue);
//   Poll    completes the commands whose outputs are ready, in order, and
//           finds the ones whose inputs never came;
//   Fail    tells the ranks (rings, doorbells); the session then drains
//           (Drained) and is destroyed, which releases what it holds.
//
// Each command's work on a rank: its streams wait for the rank's inputs-ready
// word (>= seq), make wired inputs (an activation from the producer's Y into
// the op's X), run the op (or the chunk), write outputs-ready = seq, and
// record an end event; the command completes when every rank's end completed.
//
// Thread safety: none; the lanes' thread owns it. Every engine call is made
// from that thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/engine/engine.h"
#include "server/ops/layer_ops.h"
#include "server/ops/op_context.h"
#include "server/sessions/lane_arbiter.h"
#include "server/sessions/lane_devices.h"
#include "server/sessions/piece_graphs.h"
#include "server/sessions/session.h"
#include "server/sessions/session_stats.h"

namespace overlap::sessions {

// CLOCK_MONOTONIC in ns: the clock of the rings' posted_ns, enqueued_ns, done_ns.
int64_t MonotonicNs();

class SessionRun {
 public:
  // Checks `setup` against its graph and makes each op's context over the
  // session's tensors. INVALID_ARGUMENT for a setup that does not match its
  // graph; the context's errors (RESOURCE_EXHAUSTED). On an error, what the
  // setup held is released. `engine` has SharedMemory. `graphs`: replay the
  // ops that can be as graphs (piece_graphs.h, LanesOptions::graphs).
  static absl::StatusOr<std::unique_ptr<SessionRun>> Create(
      engine::Engine& engine, LaneDevices& devices, SessionSetup setup, uint64_t key,
      std::shared_ptr<SessionCountsBox> counts, bool graphs = true);
  // Waits for the session's own work (its drain events, Fail), never for
  // the devices as a whole: another session's work there is no reason to
  // wait. Then releases its contexts, the imported buffers and the ring
  // mappings (the fds close with the setup).
  ~SessionRun();
  SessionRun(const SessionRun&) = delete;
  SessionRun& operator=(const SessionRun&) = delete;

  // Frees `setup`'s imported buffers and unmaps its rings: a setup that
  // never became a SessionRun.
  static void Release(engine::Engine& engine, SessionSetup& setup);

  const std::string& id() const { return setup_.id; }
  uint64_t key() const { return key_; }
  bool deferred() const { return deferred_; }
  const SessionSetup& setup() const { return setup_; }

  // Whether a rank posted a command the lanes have not read: two loads per
  // rank, no system call (the lanes' thread polls it while it spins).
  bool HasPosted() const;
  // Reads what the ranks posted and starts each command all of them posted.
  // `now_ms` is the arbiter's clock; `polling`: the lanes' thread found them
  // while polling the rings, not after a sleep (counted per command).
  absl::Status Take(LaneArbiter& arbiter, double now_ms, bool polling);
  // Enqueues a chunk of a deferred command that the arbiter granted.
  absl::Status Issue(const LaneGrant& grant);
  // Completes the commands whose outputs are ready. DEADLINE_EXCEEDED when a
  // rank's inputs-ready word never reached a command's seq; the engine's
  // error when the device failed the session's work.
  absl::Status Poll();
  // One of the session's spans finished (LaneDevices::Collect): the op's time.
  void Finished(const LaneSpan& span);

  // Ends the session with `status` (not OK): each ring's failed_code and
  // failed_message, every command not completed marked with the code, the
  // completed doorbells rung. It then drains. Repeated calls do nothing.
  void Fail(const absl::Status& status);
  bool failed() const { return failed_; }
  // What Fail ended it with (OK before).
  const absl::Status& failure() const { return failure_; }
  // The first command a rank posted that has not completed; 0 for none.
  uint64_t Outstanding() const;
  // After Fail: whether the devices finished everything it enqueued.
  bool Drained();
  // Whether any command started and did not complete.
  bool Busy() const { return !running_.empty(); }

  std::vector<int> Devices() const;

 private:
  // One op of the session's graph.
  struct OpRun {
    const OpSpec* spec = nullptr;
    ops::Schedule schedule;
    std::unique_ptr<ops::OpContext> ctx;
    std::vector<int> session_rank;      // by the context's rank index
    int producer = -1;                  // the op whose Y is this one's X (OpSpec::input)
    bool collective = false;            // moves data between ranks
    std::vector<ops::RowRange> pieces;  // a deferred all_reduce's chunks; empty: whole
    double chunk_ms = 0;                // a recent chunk's time on rank 0
    double busy_ms = 0;                 // this command's chunks so far, rank 0
    // Its pieces' graphs; null where they enqueue directly. After ctx: the
    // graphs go first.
    std::unique_ptr<PieceGraphs> graphs;
  };
  // One command every rank posted.
  struct Command {
    uint64_t seq = 0;
    int op = 0;            // as posted: an op index or kSessionRunLayer
    std::vector<int> ops;  // what it runs, in order
    int64_t ready_ns = 0;  // every rank had posted it
    // A deferred command's bound runs from here: it was ready and headed its
    // session's queue, as the arbiter says with its first chunk's grant
    // (LaneGrant::runnable_age_ms); 0 until then.
    int64_t runnable_ns = 0;
    int64_t latest_posted_ns = 0;
    int64_t op_enqueued_ns = 0;  // its last piece's own enqueue returned
    // The lanes' time in each part of its enqueue (SessionCounts::queued_us...).
    int64_t queued_ns = 0;
    int64_t inputs_wait_ns = 0;
    int64_t wired_ns = 0;
    int64_t launch_ns = 0;
    int pieces_replayed = 0;
    int pieces_direct = 0;
    int64_t deadline_ns = 0;            // the inputs must be ready by then
    absl::Time wait_deadline;           // the same, for the engine
    bool waited = false;                // the streams wait for the inputs
    bool enqueued = false;              // all its work is on the devices
    std::vector<engine::EventId> seen;  // by rank: past the inputs wait
    std::vector<engine::EventId> done;  // by rank: outputs ready
  };
  struct Posted {
    uint64_t seq = 0;
    int32_t op = 0;
    int64_t posted_ns = 0;
  };

  SessionRun(engine::Engine& engine, LaneDevices& devices, SessionSetup setup, uint64_t key,
             std::shared_ptr<SessionCountsBox> counts);
  absl::Status Check() const;
  absl::Status MakeContexts(bool graphs);
  absl::Status ReadRing(int r);
  absl::Status Start(std::vector<Posted> posted, LaneArbiter& arbiter, double now_ms);
  absl::Status WaitInputs(Command& cmd);
  absl::Status EnqueuePiece(Command& cmd, int op, int chunk, bool forced);
  // Rings the lanes' doorbell once `rank`'s stream is past command `seq`, where
  // the engine runs host work (the host backend); a no-op elsewhere.
  absl::Status WakeWhenDone(int rank, uint64_t seq);
  absl::Status WiredInput(OpRun& op);
  absl::Status Finish(Command& cmd);
  void Complete(Command& cmd);
  absl::Status CheckOverdue(const Command& cmd);
  absl::Status Explain(const absl::Status& status, const Command& cmd);
  std::string NeverCame(int rank, uint64_t seq) const;
  std::string OpName(int op) const;
  engine::BufferRef Word(int rank, size_t offset) const;
  // A rank's stream still waiting for inputs that will not come (its client
  // is gone; a backend whose waits never fail) would hold its lane for every
  // session: the word is written from the device's other lane, past any seq.
  void ReleaseWaits();
  // Until Drained(), at most `limit`; false when it was not.
  bool WaitDrained(absl::Duration limit);
  void GiveBack(Command& cmd);
  void RingDoorbell(int rank);

  engine::Engine& engine_;
  engine::SharedMemory& shared_;
  LaneDevices& devices_;
  SessionSetup setup_;
  const uint64_t key_;
  const bool deferred_;
  std::shared_ptr<SessionCountsBox> counts_;
  std::vector<OpRun> ops_;
  std::vector<int> layer_order_;            // every op, in graph order
  std::vector<engine::StreamId> main_;      // by rank: the lane its commands start on
  std::vector<std::deque<Posted>> posted_;  // by rank: read, not yet started
  std::vector<uint64_t> read_;              // by rank: the highest seq read
  uint64_t completed_ = 0;
  std::deque<Command> running_;  // started, not completed; in seq order
  bool failed_ = false;
  absl::Status failure_;
  std::vector<engine::EventId> drain_;  // by rank, after Fail
};

}  // namespace overlap::sessions
