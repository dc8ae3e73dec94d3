#include "server/cluster/spanning_engine.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace overlap::cluster {

using engine::BufferRef;
using engine::CollectiveArgs;
using engine::EventId;
using engine::StreamId;

namespace {

std::unique_ptr<CrossNodeTransport> MakeTransport(engine::Engine& inner,
                                                  gloo_group::RendezvousStore& store,
                                                  const SpanningOptions& options) {
  const TransportKind* kind = TransportFor(inner);
  if (kind == nullptr) return nullptr;
  return kind->make(TransportContext{inner, store, options});
}

}  // namespace

SpanningEngine::SpanningEngine(engine::Engine& inner, gloo_group::RendezvousStore& store,
                               SpanningOptions options)
    : ForwardingEngine(inner),
      inner_(inner),
      store_(store),
      options_(std::move(options)),
      transport_(MakeTransport(inner_, store_, options_)) {}

SpanningEngine::~SpanningEngine() = default;

bool SpanningEngine::IsLocalDevice(int device) const {
  return device >= 0 && device < DeviceCount() &&
         options_.placement.NodeOf(device) == options_.placement.node_index;
}

int SpanningEngine::LocalDevice(int global_device) const {
  return options_.placement.LocalDevice(global_device);
}

absl::Status SpanningEngine::CheckDevice(int device, const char* what) const {
  if (device < 0 || device >= DeviceCount()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": device ", device, " is not one of the mesh's ", DeviceCount()));
  }
  return absl::OkStatus();
}

absl::Status SpanningEngine::CrossesNodes(const std::string& what) const {
  return absl::InvalidArgumentError(
      absl::StrCat(what,
                   " crosses daemons: nodes synchronise and move data only through collectives "
                   "(the p2p and direct transports need the peer's memory)"));
}

engine::DeviceInfo SpanningEngine::GetDeviceInfo(int device) const {
  if (IsLocalDevice(device)) {
    engine::DeviceInfo info = inner_.GetDeviceInfo(LocalDevice(device));
    info.index = device;
    return info;
  }
  engine::DeviceInfo info;
  info.index = device;
  info.name = absl::StrCat("device of node ", options_.placement.NodeOf(device));
  return info;
}

StreamId SpanningEngine::GetStream(int device, engine::StreamRole role, int index) {
  const std::string name = absl::StrCat(role == engine::StreamRole::kComm       ? "comm"
                                        : role == engine::StreamRole::kDeferred ? "deferred"
                                                                                : "compute",
                                        index);
  absl::MutexLock lock(&mu_);
  if (IsLocalDevice(device)) {
    const StreamId stream = inner_.GetStream(LocalDevice(device), role, index);
    stream_names_[stream] = name;
    return stream;
  }
  auto [it, inserted] =
      remote_streams_.try_emplace({device, static_cast<int>(role), index}, next_remote_stream_);
  if (inserted) {
    ++next_remote_stream_;
    stream_names_[it->second] = name;
  }
  return it->second;
}

std::string SpanningEngine::StreamName(StreamId stream) {
  absl::MutexLock lock(&mu_);
  auto it = stream_names_.find(stream);
  return it == stream_names_.end() ? absl::StrCat("stream", stream) : it->second;
}

absl::StatusOr<engine::BufferId> SpanningEngine::Allocate(int device, size_t bytes) {
  RETURN_IF_ERROR(CheckDevice(device, "Allocate"));
  if (IsLocalDevice(device)) return inner_.Allocate(LocalDevice(device), bytes);
  absl::MutexLock lock(&mu_);
  remote_devices_[next_remote_] = device;
  return next_remote_++;
}

void SpanningEngine::Free(engine::BufferId buffer) {
  if (!IsRemoteHandle(buffer)) return inner_.Free(buffer);
  absl::MutexLock lock(&mu_);
  remote_devices_.erase(buffer);
}

absl::StatusOr<EventId> SpanningEngine::CreateEvent(int device) {
  RETURN_IF_ERROR(CheckDevice(device, "CreateEvent"));
  if (IsLocalDevice(device)) return inner_.CreateEvent(LocalDevice(device));
  absl::MutexLock lock(&mu_);
  remote_devices_[next_remote_] = device;
  return next_remote_++;
}

void SpanningEngine::DestroyEvent(EventId event) {
  if (!IsRemoteHandle(event)) return inner_.DestroyEvent(event);
  absl::MutexLock lock(&mu_);
  remote_devices_.erase(event);
}

absl::Status SpanningEngine::RecordEvent(EventId event, StreamId stream) {
  if (IsRemoteStream(stream)) return absl::OkStatus();
  if (IsRemoteHandle(event)) return CrossesNodes("recording another node's event");
  return inner_.RecordEvent(event, stream);
}

absl::Status SpanningEngine::WaitEvent(StreamId stream, EventId event) {
  if (IsRemoteStream(stream)) return absl::OkStatus();
  if (IsRemoteHandle(event)) return CrossesNodes("a wait on another node's event");
  return inner_.WaitEvent(stream, event);
}

absl::StatusOr<bool> SpanningEngine::EventDone(EventId event) {
  // Another node's event: that node dispatches for its own ranks.
  if (IsRemoteHandle(event)) return true;
  return inner_.EventDone(event);
}

absl::StatusOr<double> SpanningEngine::ElapsedMs(EventId start, EventId end) {
  if (IsRemoteHandle(start) || IsRemoteHandle(end)) {
    return absl::FailedPreconditionError(
        "ElapsedMs: the events are another node's; that node times its own ranks");
  }
  return inner_.ElapsedMs(start, end);
}

absl::Status SpanningEngine::FillRandom(StreamId stream, BufferRef dst, DType dtype, uint64_t seed,
                                        float scale) {
  return IfLocal(stream, [&] { return inner_.FillRandom(stream, dst, dtype, seed, scale); });
}

absl::Status SpanningEngine::FillConstant(StreamId stream, BufferRef dst, DType dtype,
                                          float value) {
  return IfLocal(stream, [&] { return inner_.FillConstant(stream, dst, dtype, value); });
}

absl::Status SpanningEngine::Gemm(StreamId stream, const engine::GemmArgs& args) {
  if (IsRemoteStream(stream)) return absl::OkStatus();
  if (IsRemoteHandle(args.c.buffer)) return CrossesNodes("a GEMM storing into another node");
  return inner_.Gemm(stream, args);
}

absl::Status SpanningEngine::Accumulate(StreamId stream, BufferRef dst, BufferRef src,
                                        DType dtype) {
  return IfLocal(stream, [&] { return inner_.Accumulate(stream, dst, src, dtype); });
}

absl::Status SpanningEngine::Elementwise(StreamId stream, const engine::ElementwiseArgs& args) {
  return IfLocal(stream, [&] { return inner_.Elementwise(stream, args); });
}

absl::Status SpanningEngine::AllGather(const CollectiveArgs& args) {
  return Collective(engine::CollectiveOp::kAllGather, args);
}

absl::Status SpanningEngine::ReduceScatter(const CollectiveArgs& args) {
  return Collective(engine::CollectiveOp::kReduceScatter, args);
}

absl::Status SpanningEngine::AllReduce(const CollectiveArgs& args) {
  return Collective(engine::CollectiveOp::kAllReduce, args);
}

CrossNodeGroup SpanningEngine::GroupOf(int channel, StreamId stream,
                                       const std::vector<int>& members) {
  CrossNodeGroup group;
  group.channel = channel;
  group.stream_name = StreamName(stream);
  group.members = members;
  group.key = CrossNodeGroupKey(options_.job_key, channel, group.stream_name, members);
  return group;
}

absl::Status SpanningEngine::NoTransport() const {
  return absl::FailedPreconditionError(absl::StrCat(
      "a collective across daemons: this daemon's ", inner_.Name(),
      " backend has no transport between processes here (NCCL refuses two ranks of one "
      "communicator on one GPU: ranks_per_gpu must be 1)"));
}

absl::Status SpanningEngine::Collective(engine::CollectiveOp op, const CollectiveArgs& args) {
  std::vector<int> members;
  std::vector<size_t> local;
  for (size_t i = 0; i < args.ranks.size(); ++i) {
    RETURN_IF_ERROR(CheckDevice(args.ranks[i].device, "collective"));
    members.push_back(args.ranks[i].device);
    if (IsLocalDevice(args.ranks[i].device)) local.push_back(i);
  }
  if (local.empty()) return absl::OkStatus();
  if (local.size() == args.ranks.size()) {
    CollectiveArgs mine = args;
    for (engine::RankBuffers& rank : mine.ranks) rank.device = LocalDevice(rank.device);
    switch (op) {
      case engine::CollectiveOp::kAllGather:
        return inner_.AllGather(mine);
      case engine::CollectiveOp::kReduceScatter:
        return inner_.ReduceScatter(mine);
      default:
        return inner_.AllReduce(mine);
    }
  }
  if (args.algorithm != engine::LibraryAlgorithm::kLibraryChoice) {
    return absl::UnimplementedError(
        "a collective across daemons has the library's own algorithm (no pinned ring or tree)");
  }
  if (transport_ == nullptr) return NoTransport();
  return transport_->Collective(op, GroupOf(args.channel, args.ranks[0].stream, members), args,
                                local);
}

absl::Status SpanningEngine::Barrier(int channel, const std::vector<int>& devices,
                                     const std::vector<StreamId>& streams) {
  if (devices.size() != streams.size()) {
    return absl::InvalidArgumentError("barrier: one stream per device");
  }
  std::vector<size_t> local;
  for (size_t i = 0; i < devices.size(); ++i) {
    RETURN_IF_ERROR(CheckDevice(devices[i], "barrier"));
    if (IsLocalDevice(devices[i])) local.push_back(i);
  }
  if (local.empty()) return absl::OkStatus();
  if (local.size() == devices.size()) {
    std::vector<int> mine;
    for (int d : devices) mine.push_back(LocalDevice(d));
    return inner_.Barrier(channel, mine, streams);
  }
  if (transport_ == nullptr) return NoTransport();
  return transport_->Barrier(GroupOf(channel, streams[0], devices), streams, local);
}

absl::Status SpanningEngine::SendRecv(int channel, const std::vector<int>& group,
                                      const std::vector<engine::Transfer>& transfers,
                                      bool beside_gemm) {
  std::vector<int> mine;
  for (int d : group) {
    RETURN_IF_ERROR(CheckDevice(d, "send_recv"));
    if (!IsLocalDevice(d)) {
      const bool any_local =
          std::any_of(group.begin(), group.end(), [this](int g) { return IsLocalDevice(g); });
      if (!any_local) return absl::OkStatus();
      return absl::InvalidArgumentError(
          "send_recv across daemons: point-to-point schedules (ring over nccl) need a group "
          "within one node; pick the bulk or chunked mode for a group that spans nodes");
    }
    mine.push_back(LocalDevice(d));
  }
  std::vector<engine::Transfer> local = transfers;
  for (engine::Transfer& t : local) {
    t.src_device = LocalDevice(t.src_device);
    t.dst_device = LocalDevice(t.dst_device);
  }
  return inner_.SendRecv(channel, mine, local, beside_gemm);
}

absl::Status SpanningEngine::PeerCopy(StreamId stream, BufferRef dst, int dst_device, BufferRef src,
                                      int src_device) {
  RETURN_IF_ERROR(CheckDevice(dst_device, "PeerCopy dst"));
  RETURN_IF_ERROR(CheckDevice(src_device, "PeerCopy src"));
  const bool dst_local = IsLocalDevice(dst_device), src_local = IsLocalDevice(src_device);
  if (!dst_local && !src_local) return absl::OkStatus();
  if (dst_local != src_local) {
    return CrossesNodes(absl::StrCat("a peer copy from device ", src_device, " to ", dst_device));
  }
  return inner_.PeerCopy(stream, dst, LocalDevice(dst_device), src, LocalDevice(src_device));
}

absl::Status SpanningEngine::CopyToHost(void* dst, BufferRef src, int device) {
  RETURN_IF_ERROR(CheckDevice(device, "CopyToHost"));
  if (!IsLocalDevice(device)) return CrossesNodes(absl::StrCat("reading device ", device));
  return inner_.CopyToHost(dst, src, LocalDevice(device));
}

absl::Status SpanningEngine::CopyFromHost(BufferRef dst, int device, const void* src) {
  RETURN_IF_ERROR(CheckDevice(device, "CopyFromHost"));
  if (!IsLocalDevice(device)) return CrossesNodes(absl::StrCat("writing device ", device));
  return inner_.CopyFromHost(dst, LocalDevice(device), src);
}

absl::StatusOr<int64_t> SpanningEngine::FirstNonFinite(BufferRef src, DType dtype, int device) {
  RETURN_IF_ERROR(CheckDevice(device, "FirstNonFinite"));
  if (!IsLocalDevice(device)) return CrossesNodes(absl::StrCat("reading device ", device));
  return inner_.FirstNonFinite(src, dtype, LocalDevice(device));
}

absl::Status SpanningEngine::Synchronize(const std::vector<int>& devices) {
  std::vector<int> mine;
  for (int d : devices) {
    if (IsLocalDevice(d)) mine.push_back(LocalDevice(d));
  }
  return inner_.Synchronize(mine);
}

absl::StatusOr<int64_t> SpanningEngine::HoldStreams(const std::vector<StreamId>& streams,
                                                    double max_hold_ms) {
  std::vector<StreamId> mine;
  for (StreamId s : streams) {
    if (!IsRemoteStream(s)) mine.push_back(s);
  }
  if (mine.empty()) return int64_t{-1};
  return inner_.Gates()->HoldStreams(mine, max_hold_ms);
}

absl::Status SpanningEngine::ReleaseGate(int64_t ticket) {
  if (ticket < 0) return absl::OkStatus();
  return inner_.Gates()->ReleaseGate(ticket);
}

int64_t SpanningEngine::GateTimeouts(int device) const {
  return IsLocalDevice(device) ? inner_.Gates()->GateTimeouts(LocalDevice(device)) : 0;
}

absl::Status SpanningEngine::EnqueueHostWork(StreamId stream,
                                             const std::vector<engine::HostWorkBuffer>& buffers,
                                             Work work) {
  return IfLocal(
      stream, [&] { return inner_.HostWork()->EnqueueHostWork(stream, buffers, std::move(work)); });
}

}  // namespace overlap::cluster
