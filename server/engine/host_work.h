// HostWorkQueue: host work in a stream's order, the role of cudaLaunchHostFunc,
// on an engine whose buffers the host can address (the host backend), so that
// host libraries (Gloo) can carry its collectives. Engines whose memory the
// host cannot address answer null to Engine::HostWork().
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "server/engine/engine_types.h"

namespace overlap::engine {

// A buffer that host work touches, and whether it writes it: the hazard
// checker lets other streams read what the work only reads.
struct HostWorkBuffer {
  BufferRef ref;
  bool written = true;
};

class HostWorkQueue {
 public:
  virtual ~HostWorkQueue() = default;

  using Work = std::function<absl::Status(const std::vector<uint8_t*>& data)>;
  // Once `stream` reaches it, `work` runs on the host with the address of each
  // of `buffers` (on the stream's device), and an error it returns becomes the
  // stream's asynchronous error (Synchronize reports it). It may block (a
  // collective across processes): the stream waits, the device's other
  // streams go on.
  virtual absl::Status EnqueueHostWork(StreamId stream,
                                       const std::vector<HostWorkBuffer>& buffers,
                                       Work work) = 0;
};

}  // namespace overlap::engine
