// The command ring of one session rank: shared memory the daemon creates (a
// memfd), maps, and hands the client, which maps it too. The client posts
// "run op X" here and rings its doorbell (an eventfd); the daemon takes the
// command, enqueues the op on the rank's device and marks it enqueued and,
// once its outputs are ready, completed, ringing the client's doorbell. No
// gRPC call and no frame on the hot path.
//
// The layout is fixed, little-endian, 64-bit aligned, so that a client in any
// language maps it (client/python/overlapd/session.py reads the offsets
// below). One writer per word: the client writes `posted` and its slots'
// request fields; the daemon writes everything else. A writer fills a slot
// before it publishes the counter (release); a reader loads the counter
// (acquire) before the slot.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace overlap {

inline constexpr uint32_t kSessionRingMagic = 0x5253564f;  // "OVSR"
inline constexpr uint32_t kSessionRingVersion = 1;
inline constexpr uint32_t kSessionRingSlots = 64;
// What a registered tensor is to its op: session.proto's SessionTensor, in
// the daemon and in the C++ client alike.
enum class SessionTensor { kX = 1, kW = 2, kY = 3, kSignals = 4 };
inline std::string SessionTensorName(SessionTensor tensor) {  // "X" | "W" | "Y" | "SIGNALS"
  switch (tensor) {
    case SessionTensor::kX:
      return "X";
    case SessionTensor::kW:
      return "W";
    case SessionTensor::kY:
      return "Y";
    case SessionTensor::kSignals:
      return "SIGNALS";
  }
  return "?";
}

// A command's op: an index into OpenSessionReply::ops, or this for every op
// of the graph in order (the layer).
inline constexpr int32_t kSessionRunLayer = -1;

// One command. Slot i holds sequence numbers seq with seq % kSessionRingSlots == i.
struct SessionCommand {
  // Written by the client before it publishes `posted`.
  uint64_t seq;  // 1, 2, ...
  int32_t op;    // index into the session's ops, or kSessionRunLayer
  int32_t reserved;
  int64_t posted_ns;  // CLOCK_MONOTONIC when the client called
  // Written by the daemon.
  int64_t enqueued_ns;  // CLOCK_MONOTONIC when the op was enqueued on the device
  int64_t done_ns;      // when the daemon saw its outputs ready
  int32_t status;       // 0, or the gRPC code it failed with
  int32_t reserved2;
  // When the daemon's lanes read this command from the ring: with posted_ns
  // and enqueued_ns, the client's own split of its call's host time (the
  // lanes' wake-up, then the enqueue). 0 from a daemon that does not stamp it.
  int64_t taken_ns;
  uint64_t reserved3;
};
static_assert(sizeof(SessionCommand) == 64);
static_assert(offsetof(SessionCommand, taken_ns) == 48);

struct SessionRing {
  uint32_t magic;
  uint32_t version;
  std::atomic<uint64_t> posted;      // client: highest seq posted
  std::atomic<uint64_t> taken;       // daemon: highest seq read
  std::atomic<uint64_t> enqueued;    // daemon: highest seq enqueued on the device
  std::atomic<uint64_t> completed;   // daemon: highest seq whose outputs are ready
  std::atomic<int32_t> failed_code;  // daemon: the session's failure (gRPC code), 0 while it runs
  uint32_t reserved;
  char failed_message[208];  // NUL-terminated
  SessionCommand slots[kSessionRingSlots];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(offsetof(SessionRing, posted) == 8);
static_assert(offsetof(SessionRing, taken) == 16);
static_assert(offsetof(SessionRing, enqueued) == 24);
static_assert(offsetof(SessionRing, completed) == 32);
static_assert(offsetof(SessionRing, failed_code) == 40);
static_assert(offsetof(SessionRing, failed_message) == 48);
static_assert(offsetof(SessionRing, slots) == 256);
inline constexpr size_t kSessionRingBytes = 8192;  // a page multiple, > sizeof(SessionRing)
static_assert(sizeof(SessionRing) <= kSessionRingBytes);

// The signal words of a rank (SESSION_TENSOR_SIGNALS, 16 bytes of shared
// memory the client registers): the client's stream writes the seq of a
// command to `inputs_ready` once its inputs are written; the daemon's streams
// wait for it, and write the seq to `outputs_ready` once the op's outputs
// are; the client's stream waits for that. On the host backend the client
// writes inputs_ready before posting, and waits on its doorbell.
inline constexpr size_t kSignalInputsReadyOffset = 0;
inline constexpr size_t kSignalOutputsReadyOffset = 8;
inline constexpr size_t kSignalBytes = 16;

}  // namespace overlap
