// One rank of a collective group whose ranks may live in several processes
// (overlapd daemons on the host backend), over Gloo's TCP transport: the data
// plane between daemons, as NCCL is between GPUs.
//
// The ranks meet in a RendezvousStore under the group's prefix, then connect a
// full mesh of TCP pairs. Every rank must issue the same collectives in the same
// order with the same counts and dtypes; each collective is tagged with its
// sequence number in the group and its size, so ranks that disagree (on the
// order, or on a size) time out instead of mixing data: Gloo's transport ends
// the process, from a thread of its own, when paired transfers differ in size.
//
// Errors (every message names the group prefix and this rank):
//   INVALID_ARGUMENT   bad options, null buffers, a sum in fp8 (fp8 is only
//                      gathered); nothing was sent.
//   DEADLINE_EXCEEDED  a peer did not take part within `timeout` (or never
//                      joined, for Connect).
//   ABORTED            a peer's connection closed or broke (its process died or
//                      destroyed its group), as when an NCCL communicator aborts.
//   UNAVAILABLE        this rank's TCP device could not bind `bind_address`.
//   INTERNAL           a Gloo assertion (GLOO_ENFORCE) failed.
// Connect also returns the store's own errors. After any error from Gloo the
// group is broken: its connections are closed (so the other ranks fail at once
// instead of at their timeout), and every later collective returns ABORTED
// carrying the first error. Build a new group under a new prefix.
//
// Each collective waits at most `timeout` for any one transfer; a peer whose
// sockets closed fails the next one at once. Connect waits `timeout` in all for
// the other ranks' addresses, and a rank that published its address and froze
// before connecting can cost up to another `timeout` (Gloo's pair connect).
// Connect returns once this rank's connections are up: a peer may still be
// finishing its own Connect, and its first collective then waits for it.
//
// Thread safety: one thread at a time per GlooGroup (each rank is driven by its
// own stream thread); distinct groups may be used from different threads at once.
// Connect sets SIGPIPE to SIG_IGN for the process when it is SIG_DFL: Gloo
// writes to sockets with plain writev(2), and a peer that died would otherwise
// kill this process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/dtype.h"
#include "server/gloo/rendezvous_store.h"

namespace gloo {
class Context;
}  // namespace gloo

namespace overlap::gloo_group {

struct GlooGroupOptions {
  int rank = 0;
  int size = 1;
  // Keys of this group in the store (job/group/channel). Unique per incarnation
  // of a group: a rebuilt group under an old prefix could read a dead rank's
  // address left in the store.
  std::string prefix;
  // The IP this rank's TCP device binds (the node's peer address).
  std::string bind_address = "127.0.0.1";
  absl::Duration timeout = absl::Seconds(60);  // connecting, and every collective
};

class GlooGroup {
 public:
  // Blocks until every rank connected (full mesh through the store) or the
  // timeout: DEADLINE_EXCEEDED naming the group prefix and the missing rank(s).
  static absl::StatusOr<std::unique_ptr<GlooGroup>> Connect(RendezvousStore& store,
                                                            const GlooGroupOptions& options);
  // Closes this rank's connections: the other ranks' next collective fails ABORTED.
  ~GlooGroup();
  GlooGroup(const GlooGroup&) = delete;
  GlooGroup& operator=(const GlooGroup&) = delete;

  int rank() const { return options_.rank; }
  int size() const { return options_.size; }
  const std::string& prefix() const { return options_.prefix; }

  // Buffers are host memory of `count` elements of `dtype` unless said otherwise;
  // send and recv are either the same pointer (in place) or disjoint. A count of
  // 0 does nothing and sends nothing (every rank must pass 0 alike).

  // recv = the sum over ranks of send, computed in fp32 and rounded to `dtype`
  // (fp32, bf16, fp16). Every rank gets the same bits.
  absl::Status AllReduce(DType dtype, const void* send, void* recv, size_t count);
  // recv (count * size elements) = every rank's send, rank-major. Any dtype,
  // copied bit for bit. send may be recv's block `rank` (in place).
  absl::Status AllGather(DType dtype, const void* send, void* recv, size_t count);
  // send holds count * size elements; recv (count elements) gets the sum over
  // ranks of block `rank`, as AllReduce sums. recv may overlap send.
  absl::Status ReduceScatter(DType dtype, const void* send, void* recv, size_t count);
  // Returns once every rank has entered it.
  absl::Status Barrier();

 private:
  GlooGroup(GlooGroupOptions options, std::shared_ptr<::gloo::Context> context);

  // Runs one Gloo collective: checks the group is not broken, and turns what
  // Gloo throws into a Status, breaking the group.
  template <typename Fn>
  absl::Status Run(const char* op, Fn&& fn);
  absl::Status OpError(const char* op, absl::Status status) const;
  // The bytes of `count` elements times `blocks`, both buffers given; else
  // the op's error (OpError).
  absl::StatusOr<size_t> BufferBytes(const char* op, DType dtype, const void* send,
                                     const void* recv, size_t count, size_t blocks) const;
  // The next collective's tag: its sequence number mixed with its byte count.
  uint32_t NextTag(size_t bytes) {
    const uint64_t mixed =
        (uint64_t{next_tag_++} * 0x9E3779B97F4A7C15ull) ^ (bytes * 0xBF58476D1CE4E5B9ull);
    return static_cast<uint32_t>(mixed ^ (mixed >> 32));
  }

  const GlooGroupOptions options_;
  std::shared_ptr<::gloo::Context> context_;
  uint32_t next_tag_ = 0;
  absl::Status broken_;           // the first transport error; OK while usable
  std::vector<uint8_t> scratch_;  // ReduceScatter's reduced copy of send, reused
};

}  // namespace overlap::gloo_group
