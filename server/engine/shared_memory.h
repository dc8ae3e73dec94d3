// SharedMemory: buffers another process owns and hands the daemon, and the
// stream-ordered signals that order work across the two processes (a session:
// server/sessions/). Engines that cannot map another process's memory answer
// null to Engine::Shared().
//
// What is shared is named by a file descriptor the client passed over the
// session socket (SCM_RIGHTS), never by a path or an id another user could
// guess:
//   - host backend: a memfd (memfd_create) or any shared regular file, mapped
//     MAP_SHARED;
//   - CUDA: a POSIX file descriptor exported from a cuMemCreate allocation
//     (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), imported with
//     cuMemImportFromShareableHandle and mapped on the device. This works
//     between processes of different users (the fd is the capability), which
//     legacy CUDA IPC handles (cudaIpcGetMemHandle) do not promise under the
//     hardened unit.
//
// Signals are 64-bit words inside an imported buffer: one process's stream
// writes a value once the work before it is done, the other's stream waits
// until the word reaches it (cuStreamWriteValue64 / cuStreamWaitValue64 on
// CUDA; stream tasks on the host). No host thread waits for a device.
//
// Thread safety: the engine's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/engine/engine_types.h"

namespace overlap::engine {

class SharedMemory {
 public:
  virtual ~SharedMemory() = default;

  // Maps `bytes` of the shared memory `fd` names, from `offset` (any byte
  // offset: the engine maps from the granule below it), as a buffer of
  // `device`. The engine duplicates what it keeps: the caller still owns and
  // closes `fd`. Engine::Free unmaps it; the memory itself stays the owner's
  // and is not counted in the device's pool. INVALID_ARGUMENT for an fd that
  // is not shared memory of this engine's kind (a pipe, a socket, a cuMem
  // handle on the host backend), for one smaller than offset + bytes, or for
  // 0 bytes.
  virtual absl::StatusOr<BufferId> ImportBuffer(int device, int fd, size_t offset,
                                                size_t bytes) = 0;

  // Later work on `stream` waits until the 64-bit word at `word` (8 bytes, 8-
  // aligned, of an imported buffer of the stream's device) is >= `value`. A
  // wait not met by `deadline` fails the stream (DEADLINE_EXCEEDED, reported
  // by Synchronize) where the backend can tell; CUDA's cannot, and the caller
  // must watch the word itself (sessions do).
  virtual absl::Status WaitValue(StreamId stream, BufferRef word, uint64_t value,
                                 absl::Time deadline) = 0;
  // Once `stream` reaches it, the word at `word` becomes `value`, after every
  // write before it on the stream is visible to the other process.
  virtual absl::Status WriteValue(StreamId stream, BufferRef word, uint64_t value) = 0;
};

}  // namespace overlap::engine
