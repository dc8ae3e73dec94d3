// FlightEngine: the engine decorator that records every collective the
// daemon issues (all-gather, reduce-scatter, all-reduce, send/recv, barrier)
// into a FlightRecorder: one choke point below the ops, the runner and the
// session lanes. A collective is recorded as enqueued before its call (so that
// a call that never returns still shows), failed when the call fails,
// finished when a later Synchronize of its ranks returns OK, and aborted when
// that Synchronize returns an error instead (FlightRecorder::SyncFailed).
//
// The job (or session) and op a collective serves come from the calling
// thread: ScopedFlightLabel sets them for its lifetime.
//
// FlightEngines nest: a job spanning daemons runs on a FlightEngine (its
// scope, its global ranks, its own node's ranks only) around the spanning
// engine around the daemon's FlightEngine. Only the outermost records a call
// (a thread-local depth says which), so that a collective is recorded once,
// with the ranks the job knows.
//
// The recorder must outlive the engine. Thread safety: the wrapped engine's;
// the recorder is thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/engine/forwarding_engine.h"
#include "server/flight/flight_recorder.h"

namespace overlap::flight {

// Labels the collectives the current thread issues while it lives; nests.
class ScopedFlightLabel {
 public:
  ScopedFlightLabel(std::string job, std::string job_op);
  ~ScopedFlightLabel();
  ScopedFlightLabel(const ScopedFlightLabel&) = delete;
  ScopedFlightLabel& operator=(const ScopedFlightLabel&) = delete;

 private:
  std::string saved_job_, saved_op_;
};

// Labels the current thread's collectives with `job_op`, keeping the job (or
// session) of the enclosing ScopedFlightLabel; nests.
class ScopedFlightOp {
 public:
  explicit ScopedFlightOp(std::string job_op);
  ~ScopedFlightOp();
  ScopedFlightOp(const ScopedFlightOp&) = delete;
  ScopedFlightOp& operator=(const ScopedFlightOp&) = delete;

 private:
  std::string saved_op_;
};

class FlightEngine final : public engine::ForwardingEngine {
 public:
  // Owns `inner`.
  FlightEngine(std::unique_ptr<engine::Engine> inner, FlightRecorder& recorder);
  // Around `inner`, which must outlive it: records in `scope`
  // (CollectiveCall::scope) only the ranks `inner` says are its own
  // (Engine::IsLocalDevice).
  FlightEngine(engine::Engine& inner, FlightRecorder& recorder, std::string scope);

  absl::Status AllGather(const engine::CollectiveArgs& args) override;
  absl::Status ReduceScatter(const engine::CollectiveArgs& args) override;
  absl::Status AllReduce(const engine::CollectiveArgs& args) override;
  absl::Status SendRecv(int channel, const std::vector<int>& group,
                        const std::vector<engine::Transfer>& transfers, bool beside_gemm) override;
  absl::Status Barrier(int channel, const std::vector<int>& devices,
                       const std::vector<engine::StreamId>& streams) override;
  absl::Status Synchronize(const std::vector<int>& devices) override;

 private:
  template <typename Issue>
  absl::Status Record(CollectiveCall call, Issue issue);

  std::unique_ptr<engine::Engine> owned_;
  FlightRecorder& recorder_;
  const std::string scope_;
};

}  // namespace overlap::flight
