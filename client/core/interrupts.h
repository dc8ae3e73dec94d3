// Ctrl-C and SIGTERM for overlapctl. Install() blocks both in every thread
// and waits for them on a thread of its own, so that a command can act on
// one with the gRPC client (submit --wait cancels its job, as a Slurm time
// limit or scancel expects) instead of dying with the job still holding GPUs.
// Without a handler in scope, or on a second signal, overlapctl exits 130.
#pragma once

#include <functional>

namespace overlap::client {

// Once, first thing in main (before gRPC starts threads, which would inherit
// the old signal mask).
void InstallInterrupts();

// While alive, an interrupt runs `handler` (on the signal thread) instead of
// exiting; the handler decides whether to exit.
class OnInterrupt {
 public:
  explicit OnInterrupt(std::function<void(int signal)> handler);
  ~OnInterrupt();
  OnInterrupt(const OnInterrupt&) = delete;
  OnInterrupt& operator=(const OnInterrupt&) = delete;
};

}  // namespace overlap::client
