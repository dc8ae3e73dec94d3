#include "server/runner/timeline.h"

#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/byte_size.h"
#include "common/status_macros.h"

namespace overlap::runner {

TimelineEngine::TimelineEngine(engine::Engine& inner, std::vector<TimelineLane> lanes)
    : engine::ForwardingEngine(inner), lanes_(std::move(lanes)) {
  for (size_t i = 0; i < lanes_.size(); ++i) {
    lane_of_stream_.emplace(lanes_[i].stream, static_cast<int>(i));
  }
}

TimelineEngine::~TimelineEngine() { Clear(); }

void TimelineEngine::Clear() {
  for (engine::EventId event : events_) inner().DestroyEvent(event);
  events_.clear();
  pending_.clear();
  open_end_.clear();
}

absl::Status TimelineEngine::WaitEvent(engine::StreamId stream, engine::EventId event) {
  open_end_.erase(stream);  // the next span on it may start later than the last one ended
  return inner().WaitEvent(stream, event);
}

std::string TimelineEngine::RankName(int device) const {
  for (const TimelineLane& lane : lanes_) {
    if (lane.device == device) return absl::StrCat("r", lane.rank);
  }
  return absl::StrCat("device ", device);
}

absl::Status TimelineEngine::Traced(const std::string& kind, const std::vector<Part>& parts,
                                    absl::FunctionRef<absl::Status()> work) {
  // Spans of this call, in `pending_` from `first` on. A stream named twice
  // (several transfers of one group) gets one span.
  const size_t first = pending_.size();
  std::set<engine::StreamId> seen;
  for (const Part& part : parts) {
    const auto lane = lane_of_stream_.find(part.stream);
    if (lane == lane_of_stream_.end() || !seen.insert(part.stream).second) continue;
    const int device = lanes_[lane->second].device;
    ASSIGN_OR_RETURN(engine::EventId end, inner().CreateEvent(device));
    events_.push_back(end);
    engine::EventId begin;
    if (const auto open = open_end_.find(part.stream); open != open_end_.end()) {
      begin = open->second;
    } else {
      ASSIGN_OR_RETURN(begin, inner().CreateEvent(device));
      events_.push_back(begin);
      RETURN_IF_ERROR(inner().RecordEvent(begin, part.stream));
    }
    pending_.push_back(Pending{label_, lane->second, kind, part.name, begin, end});
  }
  RETURN_IF_ERROR(work());
  for (size_t i = first; i < pending_.size(); ++i) {
    const engine::StreamId stream = lanes_[pending_[i].lane].stream;
    RETURN_IF_ERROR(inner().RecordEvent(pending_[i].end, stream));
    open_end_[stream] = pending_[i].end;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TimelineSpan>> TimelineEngine::Collect(
    const std::vector<engine::EventId>& origin) {
  std::vector<TimelineSpan> spans;
  for (const Pending& p : pending_) {
    const TimelineLane& lane = lanes_[p.lane];
    if (lane.rank < 0 || lane.rank >= static_cast<int>(origin.size())) {
      return absl::InternalError(absl::StrCat("timeline: no origin event for rank ", lane.rank));
    }
    ASSIGN_OR_RETURN(double start, inner().ElapsedMs(origin[lane.rank], p.begin));
    ASSIGN_OR_RETURN(double end, inner().ElapsedMs(origin[lane.rank], p.end));
    spans.push_back(TimelineSpan{p.op, lane.rank, lane.name, p.kind, p.name, start, end});
  }
  return spans;
}

absl::Status TimelineEngine::FillRandom(engine::StreamId stream, engine::BufferRef dst, DType dtype,
                                        uint64_t seed, float scale) {
  return Traced("fill", {{stream, absl::StrCat("fill ", FormatBytes(dst.bytes))}},
                [&] { return inner().FillRandom(stream, dst, dtype, seed, scale); });
}

absl::Status TimelineEngine::FillConstant(engine::StreamId stream, engine::BufferRef dst,
                                          DType dtype, float value) {
  return Traced("fill", {{stream, absl::StrCat("fill ", FormatBytes(dst.bytes))}},
                [&] { return inner().FillConstant(stream, dst, dtype, value); });
}

absl::Status TimelineEngine::Gemm(engine::StreamId stream, const engine::GemmArgs& args) {
  // m x k x n, as the reports write shapes; "+=" where it adds to C.
  std::string name = absl::StrFormat("gemm %dx%dx%d", args.m, args.k, args.n);
  if (args.batch > 1) absl::StrAppend(&name, " x", args.batch);
  if (args.beta != 0.0f) absl::StrAppend(&name, " +=");
  if (args.c_on_peer) absl::StrAppend(&name, " into peer");
  return Traced("gemm", {{stream, name}}, [&] { return inner().Gemm(stream, args); });
}

absl::Status TimelineEngine::Accumulate(engine::StreamId stream, engine::BufferRef dst,
                                        engine::BufferRef src, DType dtype) {
  return Traced("reduce", {{stream, absl::StrCat("reduce ", FormatBytes(dst.bytes))}},
                [&] { return inner().Accumulate(stream, dst, src, dtype); });
}

absl::Status TimelineEngine::Elementwise(engine::StreamId stream,
                                         const engine::ElementwiseArgs& args) {
  const std::string name = absl::StrFormat("%s %dx%d", ActivationName(args.activation), args.rows,
                                           args.src_cols);
  return Traced("elementwise", {{stream, name}}, [&] { return inner().Elementwise(stream, args); });
}

absl::Status TimelineEngine::Collective(const std::string& name, const engine::CollectiveArgs& args,
                                        absl::FunctionRef<absl::Status()> work) {
  const size_t bytes = args.count * DTypeSize(args.dtype);
  std::vector<Part> parts;
  for (const engine::RankBuffers& rank : args.ranks) {
    parts.push_back(Part{rank.stream, absl::StrCat(name, " ", FormatBytes(bytes))});
  }
  return Traced("collective", parts, work);
}

absl::Status TimelineEngine::AllGather(const engine::CollectiveArgs& args) {
  return Collective("all_gather", args, [&] { return inner().AllGather(args); });
}

absl::Status TimelineEngine::ReduceScatter(const engine::CollectiveArgs& args) {
  return Collective("reduce_scatter", args, [&] { return inner().ReduceScatter(args); });
}

absl::Status TimelineEngine::AllReduce(const engine::CollectiveArgs& args) {
  return Collective("all_reduce", args, [&] { return inner().AllReduce(args); });
}

absl::Status TimelineEngine::SendRecv(int channel, const std::vector<int>& group,
                                      const std::vector<engine::Transfer>& transfers,
                                      bool beside_gemm) {
  // One span per stream: what it sends, then what it receives, in this group.
  std::map<engine::StreamId, std::pair<std::vector<std::string>, std::vector<std::string>>> what;
  for (const engine::Transfer& t : transfers) {
    const std::string size = FormatBytes(t.src.bytes);
    what[t.src_stream].first.push_back(absl::StrCat("send ", size, " to ", RankName(t.dst_device)));
    what[t.dst_stream].second.push_back(
        absl::StrCat("recv ", size, " from ", RankName(t.src_device)));
  }
  std::vector<Part> parts;
  for (auto& [stream, sends_recvs] : what) {
    std::vector<std::string> names = sends_recvs.first;
    names.insert(names.end(), sends_recvs.second.begin(), sends_recvs.second.end());
    parts.push_back(Part{stream, absl::StrJoin(names, ", ")});
  }
  return Traced("sendrecv", parts,
                [&] { return inner().SendRecv(channel, group, transfers, beside_gemm); });
}

absl::Status TimelineEngine::PeerCopy(engine::StreamId stream, engine::BufferRef dst,
                                      int dst_device, engine::BufferRef src, int src_device) {
  const std::string name = absl::StrCat("copy ", FormatBytes(src.bytes), " ", RankName(src_device),
                                        "->", RankName(dst_device));
  return Traced("copy", {{stream, name}},
                [&] { return inner().PeerCopy(stream, dst, dst_device, src, src_device); });
}

}  // namespace overlap::runner
