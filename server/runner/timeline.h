// Timelines: where one iteration of an op's schedule spent its time, span by
// span, on every rank's compute and comm streams.
//
// A step's exposed communication says how much a schedule lost, not where: in
// GEMM pieces that ran slower than the GEMM alone (kernel boundaries, HBM
// contention with a copy beside them), or in the compute stream idling while
// a transfer it waits for lands. TimelineEngine wraps the engine for one
// traced iteration and brackets each piece of work (GEMM, copy, collective,
// reduction) with events on its stream; the spans' times are read against
// each rank's iteration start once the iteration is done. The traced
// iteration runs after the timed ones and is not one of them.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "server/engine/engine.h"
#include "server/engine/forwarding_engine.h"

namespace overlap::runner {

// A stream a timeline follows: rank `rank` (on `device`), lane "compute" or
// "comm".
struct TimelineLane {
  engine::StreamId stream = 0;
  int rank = 0;
  int device = 0;
  std::string name;
};

struct TimelineSpan {
  std::string op;  // the label when it was enqueued (SetLabel): the op it belongs to
  int rank = 0;
  std::string lane;
  std::string kind;  // gemm | copy | collective | sendrecv | reduce | fill
  std::string name;  // e.g. "gemm 2048x2048x4096 +=", "copy 16.0 MiB r0->r1"
  double start_ms = 0;
  double end_ms = 0;
};

// Forwards every call to `inner` (the same buffers, streams and events) and,
// for work enqueued on a lane's stream, records an event before and after it.
// Work on other streams runs untraced. Never replays graphs: a traced
// iteration is enqueued call by call. Errors are the inner engine's. Not
// thread-safe: one iteration, enqueued from one thread; it must outlive the
// work it traced (its destructor destroys the events).
class TimelineEngine final : public engine::ForwardingEngine {
 public:
  TimelineEngine(engine::Engine& inner, std::vector<TimelineLane> lanes);
  ~TimelineEngine() override;

  // The spans in the order they were enqueued, timed against origin[rank]: an
  // event of that rank's device recorded before any of them. Call once the
  // devices are synchronized.
  absl::StatusOr<std::vector<TimelineSpan>> Collect(const std::vector<engine::EventId>& origin);
  // Forgets the spans so far (their work must be done): the next Collect
  // covers what is enqueued from now on.
  void Clear();
  // Spans enqueued from now on belong to `op` (TimelineSpan::op).
  void SetLabel(std::string op) { label_ = std::move(op); }
  const std::string& label() const { return label_; }

  // The calls traced on a lane's stream; every other call is forwarded as is.
  absl::Status WaitEvent(engine::StreamId stream, engine::EventId event) override;
  absl::Status FillRandom(engine::StreamId stream, engine::BufferRef dst, DType dtype,
                          uint64_t seed, float scale) override;
  absl::Status FillConstant(engine::StreamId stream, engine::BufferRef dst, DType dtype,
                            float value) override;
  absl::Status Gemm(engine::StreamId stream, const engine::GemmArgs& args) override;
  absl::Status Accumulate(engine::StreamId stream, engine::BufferRef dst, engine::BufferRef src,
                          DType dtype) override;
  absl::Status Elementwise(engine::StreamId stream, const engine::ElementwiseArgs& args) override;
  absl::Status AllGather(const engine::CollectiveArgs& args) override;
  absl::Status ReduceScatter(const engine::CollectiveArgs& args) override;
  absl::Status AllReduce(const engine::CollectiveArgs& args) override;
  absl::Status SendRecv(int channel, const std::vector<int>& group,
                        const std::vector<engine::Transfer>& transfers, bool beside_gemm) override;
  absl::Status PeerCopy(engine::StreamId stream, engine::BufferRef dst, int dst_device,
                        engine::BufferRef src, int src_device) override;

  // A traced iteration is enqueued call by call: no graph replay.
  engine::GraphCapture* Graphs() const override { return nullptr; }

 private:
  // One stream's part of a traced call: its lane and the name of its span.
  struct Part {
    engine::StreamId stream;
    std::string name;
  };
  struct Pending {
    std::string op;
    int lane;
    std::string kind, name;
    engine::EventId begin, end;
  };

  // Runs `work`, bracketed by events on each part's stream that has a lane.
  absl::Status Traced(const std::string& kind, const std::vector<Part>& parts,
                      absl::FunctionRef<absl::Status()> work);
  absl::Status Collective(const std::string& name, const engine::CollectiveArgs& args,
                          absl::FunctionRef<absl::Status()> work);
  std::string RankName(int device) const;

  std::vector<TimelineLane> lanes_;
  std::map<engine::StreamId, int> lane_of_stream_;
  std::vector<Pending> pending_;
  std::vector<engine::EventId> events_;  // every event created, to destroy
  // Per stream, the end event of its last span while nothing has waited on the
  // stream since: the next span starts there, and needs no record of its own.
  // A record costs the stream ~1.5 us on an H200 (docs/PERFORMANCE.md), so
  // one per boundary instead of two keeps the traced iteration closer to the
  // timed ones.
  std::map<engine::StreamId, engine::EventId> open_end_;
  std::string label_;
};

}  // namespace overlap::runner
