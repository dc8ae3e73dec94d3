#include "server/flight/flight_engine.h"

#include <chrono>
#include <utility>

#include "common/dtype.h"

namespace overlap::flight {
namespace {

thread_local std::string current_job;
thread_local std::string current_op;
// FlightEngines on this thread's call stack that record (the outermost does).
thread_local int recording_depth = 0;

class RecordingScope {
 public:
  RecordingScope() { ++recording_depth; }
  ~RecordingScope() { --recording_depth; }
  RecordingScope(const RecordingScope&) = delete;
  RecordingScope& operator=(const RecordingScope&) = delete;
};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Lane LaneOf(int channel) {
  return channel == engine::kDeferredLaneChannel ? Lane::kDeferred : Lane::kCritical;
}

CollectiveCall CallOf(const char* op, const engine::CollectiveArgs& args) {
  CollectiveCall call;
  call.op = op;
  call.channel = args.channel;
  call.lane = LaneOf(args.channel);
  call.dtype = DTypeName(args.dtype);
  for (const engine::RankBuffers& rank : args.ranks) {
    call.group.push_back(rank.device);
    call.bytes_by_rank.push_back(static_cast<int64_t>(rank.send.bytes));
  }
  return call;
}

}  // namespace

ScopedFlightLabel::ScopedFlightLabel(std::string job, std::string job_op)
    : saved_job_(std::exchange(current_job, std::move(job))),
      saved_op_(std::exchange(current_op, std::move(job_op))) {}

ScopedFlightLabel::~ScopedFlightLabel() {
  current_job = std::move(saved_job_);
  current_op = std::move(saved_op_);
}

ScopedFlightOp::ScopedFlightOp(std::string job_op)
    : saved_op_(std::exchange(current_op, std::move(job_op))) {}

ScopedFlightOp::~ScopedFlightOp() { current_op = std::move(saved_op_); }

FlightEngine::FlightEngine(std::unique_ptr<engine::Engine> inner, FlightRecorder& recorder)
    : engine::ForwardingEngine(*inner), owned_(std::move(inner)), recorder_(recorder) {}

FlightEngine::FlightEngine(engine::Engine& inner, FlightRecorder& recorder, std::string scope)
    : engine::ForwardingEngine(inner), recorder_(recorder), scope_(std::move(scope)) {}

template <typename Issue>
absl::Status FlightEngine::Record(CollectiveCall call, Issue issue) {
  if (recording_depth > 0) return issue();  // an outer FlightEngine records it
  const RecordingScope recording;
  call.job = current_job;
  call.job_op = current_op;
  if (!scope_.empty()) {
    call.scope = scope_;
    call.local.reserve(call.group.size());
    bool any = false;
    for (int rank : call.group) {
      call.local.push_back(inner().IsLocalDevice(rank));
      any = any || call.local.back();
    }
    // Another node's collective: nothing of it runs here.
    if (!any) return issue();
  }
  // Recorded before the call: a rank's ring must show the collective it is
  // stuck in, even when the call itself never returns.
  const uint64_t seq = recorder_.Enqueued(call, NowNs());
  absl::Status status = issue();
  if (!status.ok()) recorder_.Failed(call, seq, NowNs(), status);
  return status;
}

absl::Status FlightEngine::AllGather(const engine::CollectiveArgs& args) {
  return Record(CallOf("all_gather", args), [&] { return inner().AllGather(args); });
}

absl::Status FlightEngine::ReduceScatter(const engine::CollectiveArgs& args) {
  return Record(CallOf("reduce_scatter", args), [&] { return inner().ReduceScatter(args); });
}

absl::Status FlightEngine::AllReduce(const engine::CollectiveArgs& args) {
  return Record(CallOf("all_reduce", args), [&] { return inner().AllReduce(args); });
}

absl::Status FlightEngine::SendRecv(int channel, const std::vector<int>& group,
                                    const std::vector<engine::Transfer>& transfers,
                                    bool beside_gemm) {
  CollectiveCall call;
  call.op = "send_recv";
  call.channel = channel;
  call.lane = LaneOf(channel);
  call.group = group;
  call.bytes_by_rank.assign(group.size(), 0);
  for (const engine::Transfer& t : transfers) {
    for (size_t i = 0; i < group.size(); ++i) {
      if (group[i] == t.src_device) call.bytes_by_rank[i] += static_cast<int64_t>(t.src.bytes);
    }
  }
  return Record(std::move(call),
                [&] { return inner().SendRecv(channel, group, transfers, beside_gemm); });
}

absl::Status FlightEngine::Barrier(int channel, const std::vector<int>& devices,
                                   const std::vector<engine::StreamId>& streams) {
  CollectiveCall call;
  call.op = "barrier";
  call.channel = channel;
  call.lane = LaneOf(channel);
  call.group = devices;
  return Record(std::move(call), [&] { return inner().Barrier(channel, devices, streams); });
}

absl::Status FlightEngine::Synchronize(const std::vector<int>& devices) {
  if (recording_depth > 0) return inner().Synchronize(devices);
  const RecordingScope recording;
  absl::Status status = inner().Synchronize(devices);
  if (status.ok()) {
    recorder_.FinishedThrough(devices, NowNs(), scope_);
  } else {
    recorder_.SyncFailed(devices, NowNs(), status, scope_);
  }
  return status;
}

}  // namespace overlap::flight
