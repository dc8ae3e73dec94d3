// overlapd's session client for C++ frameworks: one process per rank opens a
// session for a layer graph on the daemon's session socket, registers its own
// tensors (shared memory), and then asks for the graph's ops without a round
// trip: a command on the shared ring and a doorbell (docs/SESSIONS.md;
// proto/overlap/v1/session.proto, common/session_ring.h). Depends on common/
// and the protocol only.
//
//   auto s = overlap::session::Session::Open(path, "train", graph_yaml, rank);
//   for (const TensorNeed& need : s->needs()) { ...allocate, s->Register(...); }
//   s->Start();                       // once every rank has started
//   uint64_t seq = *s->Post("fc1");   // inputs written: run fc1
//   s->Wait(seq, absl::Seconds(30));  // its outputs are ready
//
// Errors are absl::Status with the daemon's code: INVALID_ARGUMENT (a bad
// graph, a buffer too small, an fd that is not shared memory), ALREADY_EXISTS
// (the rank is taken), RESOURCE_EXHAUSTED (caps), FAILED_PRECONDITION,
// DEADLINE_EXCEEDED (a rank that never started), UNAVAILABLE (a rank that
// went away), CANCELLED (the session was closed).
//
// Thread safety: a Session is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/session_ring.h"
#include "common/unix_frames.h"

namespace overlap::session {

// session.proto's SessionTensor.
using Tensor = SessionTensor;  // common/session_ring.h
inline std::string TensorName(Tensor tensor) { return SessionTensorName(tensor); }

// Host memory another process can map: a memfd, mapped here MAP_SHARED. What
// a rank registers on the host backend.
class SharedBuffer {
 public:
  // RESOURCE_EXHAUSTED when the system refuses the memory.
  static absl::StatusOr<SharedBuffer> Create(size_t bytes, const std::string& name = "tensor");
  SharedBuffer() = default;
  SharedBuffer(SharedBuffer&& other) noexcept;
  SharedBuffer& operator=(SharedBuffer&& other) noexcept;
  ~SharedBuffer();
  int fd() const { return fd_.get(); }
  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  OwnedFd fd_;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// What the rank must register for one tensor, as the daemon computed it.
struct TensorNeed {
  std::string op;  // "" for SIGNALS
  Tensor tensor = Tensor::kX;
  int64_t rows = 0;
  int64_t cols = 0;
  std::string dtype;  // "fp32" | "fp16" | "bf16" | "fp8" | "u64"
  int64_t bytes = 0;
};

struct SessionOptions {
  std::string priority;          // "critical" (default) | "deferred"
  double deferred_bound_ms = 0;  // 0 = the daemon's
  double join_timeout_s = 0;     // 0 = the daemon's; may only lower it
  double step_timeout_s = 0;     // 0 = the daemon's
  int chunk_kib = 0;             // 0 = 256
  // How long a reply may take (Start's waits for every rank, within the join timeout).
  absl::Duration reply_timeout = absl::Seconds(300);
};

// The deterministic fill of a rank's input: element i of (op, tensor, rank)
// is SeededUniform(TensorSeed(base, op, tensor, rank), i) (common/seeded_random.h).
// For other languages: with h = 64-bit FNV-1a of the op id's bytes,
//   TensorSeed = SplitMix64(base ^ SplitMix64(h ^ (tensor << 56) ^ rank))
// (tensor: X = 1, W = 2; arithmetic mod 2^64).
uint64_t TensorSeed(uint64_t base, const std::string& op, Tensor tensor, int rank);

class Session {
 public:
  // Connects to the session socket (a path, or "unix:PATH"), joins `rank` of
  // the caller's session `name` (made from `graph_text` by the first rank)
  // and maps the ring.
  static absl::StatusOr<std::unique_ptr<Session>> Open(const std::string& socket_path,
                                                       const std::string& name,
                                                       const std::string& graph_text, int rank,
                                                       const SessionOptions& options = {});
  ~Session();  // Close()
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const std::string& id() const { return id_; }
  int rank() const { return rank_; }
  int device() const { return device_; }
  int world() const { return world_; }
  const std::string& backend() const { return backend_; }
  // Where the rank allocates its tensors on CUDA (cuda_shared_buffer.h).
  const std::string& device_pci_bus_id() const { return device_pci_bus_id_; }
  const std::vector<TensorNeed>& needs() const { return needs_; }
  const std::vector<std::string>& ops() const { return ops_; }
  // The need for (op, tensor), or null.
  const TensorNeed* FindNeed(const std::string& op, Tensor tensor) const;

  // Hands the daemon `bytes` of the shared memory `fd` from `offset` as the
  // op's tensor ("" op for SIGNALS). For SIGNALS on the host backend, give
  // `mapped` (this process's mapping of those bytes): Post writes
  // "inputs ready" there.
  absl::Status Register(const std::string& op, Tensor tensor, int fd, int64_t offset, int64_t bytes,
                        void* mapped = nullptr);
  // Every need registered: returns once every rank has started.
  absl::Status Start();

  // Runs op `op` (an index into ops(), or kSessionRunLayer for them all) once
  // the inputs are ready: the command's seq. RESOURCE_EXHAUSTED while
  // kSessionRingSlots commands are outstanding; the session's failure once it
  // has failed.
  absl::StatusOr<uint64_t> Post(int op);
  absl::StatusOr<uint64_t> Post(const std::string& op);  // by id; "" = the layer
  // Until command `seq` completed: OK, or its failure or the session's;
  // DEADLINE_EXCEEDED after `timeout`.
  absl::Status Wait(uint64_t seq, absl::Duration timeout);
  // The command's slot as the ring holds it now (valid until kSessionRingSlots
  // later commands reuse it).
  SessionCommand Command(uint64_t seq) const;
  // The session's failure, OK while it runs.
  absl::Status Failure() const;

  // Leaves the session (the daemon ends it for every rank once started):
  // "closed" when every command posted has completed, else failed
  // (UNAVAILABLE). Ending the process without it fails the session.
  void Close();

 private:
  Session() = default;
  absl::Status Exchange(const std::string& frame, const std::vector<int>& fds,
                        absl::Duration timeout);

  OwnedFd socket_;
  OwnedFd ring_fd_;
  OwnedFd posted_doorbell_;
  OwnedFd completed_doorbell_;
  SessionRing* ring_ = nullptr;
  uint64_t* signals_ = nullptr;  // two words: inputs_ready, outputs_ready
  uint64_t last_posted_ = 0;
  bool started_ = false;  // Start succeeded: Close tells the daemon
  SessionOptions options_;
  std::string id_;
  int rank_ = 0;
  int device_ = 0;
  int world_ = 0;
  std::string backend_;
  std::string device_pci_bus_id_;
  std::vector<TensorNeed> needs_;
  std::vector<std::string> ops_;
};

}  // namespace overlap::session
