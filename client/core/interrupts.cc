#include "client/core/interrupts.h"

#include <pthread.h>
#include <signal.h>

#include <cstdlib>
#include <mutex>
#include <thread>
#include <utility>

namespace overlap::client {

namespace {

std::mutex mu;
std::function<void(int)>* current = nullptr;  // guarded by mu
bool interrupted = false;                      // guarded by mu

void WaitForSignals(sigset_t set) {
  for (;;) {
    int signal = 0;
    if (sigwait(&set, &signal) != 0) continue;
    std::function<void(int)> handler;
    {
      std::lock_guard<std::mutex> lock(mu);
      // A second signal, or none to handle it: stop now, as a shell expects.
      if (current == nullptr || interrupted) std::_Exit(128 + signal);
      interrupted = true;
      handler = *current;
    }
    handler(signal);
  }
}

}  // namespace

void InstallInterrupts() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread(WaitForSignals, set).detach();
}

OnInterrupt::OnInterrupt(std::function<void(int)> handler) {
  std::lock_guard<std::mutex> lock(mu);
  current = new std::function<void(int)>(std::move(handler));
}

OnInterrupt::~OnInterrupt() {
  std::lock_guard<std::mutex> lock(mu);
  delete current;
  current = nullptr;
}

}  // namespace overlap::client
