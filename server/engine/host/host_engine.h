// The host backend: every "device" is a rank of this process with its own
// share of host memory, every stream a worker thread, GEMMs run on OpenBLAS
// (one BLAS thread per stream) and collectives are real copies between the
// ranks' buffers, so overlapped schedules run and verify on machines without
// GPUs. Semantics are engine.h's; see HostEngineOptions for the extras.
//
// Differences from the CUDA backend worth knowing: every collective is its own
// rendezvous, so two collectives on one channel are not serialized against each
// other (issue order is already the same on every rank, since one call issues
// all ranks); the destructor runs all queued work before joining the streams.
//
// Shared memory (Engine::Shared, shared_memory.h): a memfd or shared regular
// file mapped MAP_SHARED (a memfd that allows sealing is sealed against
// shrinking, so that its owner cannot fault the mapping away); a stream that
// waits for a signal word looks at it every 25 us and fails with
// DEADLINE_EXCEEDED at its deadline, then goes on.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/engine/engine.h"

namespace overlap::engine {

struct HostEngineOptions {
  int device_count = 2;
  int64_t device_memory_bytes = 2LL << 30;  // capacity of each device
  // Check every call for data races at enqueue time (hazard_tracker.h); a race
  // fails the call with FAILED_PRECONDITION and is also reported by Synchronize.
  bool hazard_checks = false;
  int streams_per_role = 2;
  bool launch_gate = true;  // HoldStreams and ReleaseGate (engine.h)
  // PreheatMs (engine.h): 0, a CPU does not run faster rested; tests set it.
  double preheat_ms = 0;

  // Failure injection, for tests of error paths. Call number `fail_after`
  // (0-based, per engine, counting calls that passed validation) of `fail_op` fails with the code
  // the real library failure maps to: "all_gather", "reduce_scatter", "all_reduce", "send_recv",
  // "barrier" -> ABORTED (NCCL); "gemm" -> INTERNAL (cuBLAS); "fill_random", "fill_constant",
  // "accumulate", "peer_copy", "copy_to_host", "copy_from_host" -> UNAVAILABLE (CUDA); "allocate"
  // -> RESOURCE_EXHAUSTED. Empty: no injection.
  std::string fail_op;
  int fail_after = 0;
  // The failing call returns OK and its streams report the error at the next
  // Synchronize (like an asynchronous NCCL error); otherwise the call returns
  // it (and Synchronize reports it as well).
  bool fail_async = false;
  // After the injected failure Healthy() is false and every later call that
  // does work fails with the same status (a lost CUDA context).
  bool inject_sticky_error = false;
  // Tests only: >= 0 gives every device health readings as NVML would (a
  // healthy H200's), and this one a PCIe link at x8 of x16 and 2 uncorrectable
  // ECC errors, so that node, health and check can be driven end to end
  // without a GPU. -1: no readings, as a host has none.
  int sick_device = -1;
  // An energy counter, as NVML's would be (DeviceMonitor::EnergyJoules), so
  // that the runner's energy figures can be driven without a GPU: each device
  // draws `simulated_power_w` from the engine's creation on (0: no counter).
  // Tests may instead set `energy_counter`, whose answer is each read's.
  double simulated_power_w = 0;
  std::function<absl::StatusOr<double>(int device)> energy_counter;
  // How often that counter moves, as DeviceMonitor::EnergyCounterPeriod gives
  // it (tests of the figures' bounds; zero: with every read).
  absl::Duration energy_counter_period = absl::ZeroDuration();
};

// INVALID_ARGUMENT for bad options (no devices, unknown fail_op, ...).
absl::StatusOr<std::unique_ptr<Engine>> CreateHostEngine(const HostEngineOptions& options);

}  // namespace overlap::engine
