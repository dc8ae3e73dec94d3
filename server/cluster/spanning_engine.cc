#include "server/cluster/spanning_engine.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/gloo/gloo_group.h"

namespace overlap::cluster {

using engine::BufferRef;
using engine::CollectiveArgs;
using engine::EventId;
using engine::StreamId;

// Connects on the first collective, on the stream thread that runs it: every
// node's ranks reach that collective, so every rank of the group is there to
// connect, and nothing waits for a peer before the schedule gets there.
class SpanningEngine::LazyGroup {
 public:
  LazyGroup(gloo_group::RendezvousStore& store, gloo_group::GlooGroupOptions options)
      : store_(store), options_(std::move(options)) {}

  absl::StatusOr<gloo_group::GlooGroup*> Get() {
    absl::MutexLock lock(&mu_);
    if (group_ == nullptr && connect_status_.ok()) {
      absl::StatusOr<std::unique_ptr<gloo_group::GlooGroup>> group =
          gloo_group::GlooGroup::Connect(store_, options_);
      if (group.ok()) {
        group_ = std::move(*group);
      } else {
        connect_status_ = group.status();
      }
    }
    if (!connect_status_.ok()) return connect_status_;
    return group_.get();
  }

 private:
  gloo_group::RendezvousStore& store_;
  const gloo_group::GlooGroupOptions options_;
  // Held while connecting; the collectives then need no lock, since one
  // stream thread drives each rank's group.
  absl::Mutex mu_;
  std::unique_ptr<gloo_group::GlooGroup> group_ ABSL_GUARDED_BY(mu_);
  absl::Status connect_status_ ABSL_GUARDED_BY(mu_);
};

SpanningEngine::SpanningEngine(engine::Engine& inner, gloo_group::RendezvousStore& store,
                               SpanningOptions options)
    : ForwardingEngine(inner), inner_(inner), store_(store), options_(std::move(options)) {}

SpanningEngine::~SpanningEngine() {
  absl::MutexLock lock(&mu_);
  for (const auto& [device, buffer] : barrier_scratch_) inner_.Free(buffer);
}

bool SpanningEngine::IsLocalDevice(int device) const {
  return device >= 0 && device < DeviceCount() &&
         options_.placement.NodeOf(device) == options_.placement.node_index;
}

int SpanningEngine::LocalDevice(int global_device) const {
  return options_.placement
      .local_devices[global_device % options_.placement.devices_per_node()];
}

absl::Status SpanningEngine::CheckDevice(int device, const char* what) const {
  if (device < 0 || device >= DeviceCount()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": device ", device, " is not one of the mesh's ", DeviceCount()));
  }
  return absl::OkStatus();
}

absl::Status SpanningEngine::CrossesNodes(const std::string& what) const {
  return absl::InvalidArgumentError(absl::StrCat(
      what, " crosses daemons: nodes synchronise and move data only through collectives "
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

int64_t SpanningEngine::MemoryInUse(int device) const {
  return IsLocalDevice(device) ? inner_.MemoryInUse(LocalDevice(device)) : 0;
}

engine::DeviceTelemetry SpanningEngine::Telemetry(int device) const {
  return IsLocalDevice(device) ? inner_.Telemetry(LocalDevice(device)) : engine::DeviceTelemetry{};
}

int64_t SpanningEngine::GateTimeouts(int device) const {
  return IsLocalDevice(device) ? inner_.GateTimeouts(LocalDevice(device)) : 0;
}

StreamId SpanningEngine::GetStream(int device, engine::StreamRole role, int index) {
  const std::string name =
      absl::StrCat(role == engine::StreamRole::kComm ? "comm" : "compute", index);
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

absl::StatusOr<double> SpanningEngine::ElapsedMs(EventId start, EventId end) {
  if (IsRemoteHandle(start) || IsRemoteHandle(end)) {
    return absl::FailedPreconditionError(
        "ElapsedMs: the events are another node's; that node times its own ranks");
  }
  return inner_.ElapsedMs(start, end);
}

absl::Status SpanningEngine::FillRandom(StreamId stream, BufferRef dst, DType dtype,
                                        uint64_t seed, float scale) {
  if (IsRemoteStream(stream)) return absl::OkStatus();
  return inner_.FillRandom(stream, dst, dtype, seed, scale);
}

absl::Status SpanningEngine::FillConstant(StreamId stream, BufferRef dst, DType dtype,
                                          float value) {
  if (IsRemoteStream(stream)) return absl::OkStatus();
  return inner_.FillConstant(stream, dst, dtype, value);
}

absl::Status SpanningEngine::Gemm(StreamId stream, const engine::GemmArgs& args) {
  if (IsRemoteStream(stream)) return absl::OkStatus();
  if (IsRemoteHandle(args.c.buffer)) return CrossesNodes("a GEMM storing into another node");
  return inner_.Gemm(stream, args);
}

absl::Status SpanningEngine::Accumulate(StreamId stream, BufferRef dst, BufferRef src,
                                        DType dtype) {
  if (IsRemoteStream(stream)) return absl::OkStatus();
  return inner_.Accumulate(stream, dst, src, dtype);
}

absl::Status SpanningEngine::AllGather(const CollectiveArgs& args) {
  return Collective(CollectiveOp::kAllGather, args);
}

absl::Status SpanningEngine::ReduceScatter(const CollectiveArgs& args) {
  return Collective(CollectiveOp::kReduceScatter, args);
}

absl::Status SpanningEngine::AllReduce(const CollectiveArgs& args) {
  return Collective(CollectiveOp::kAllReduce, args);
}

absl::StatusOr<std::string> SpanningEngine::CommunicatorId(int channel,
                                                           const std::string& stream_name,
                                                           const std::vector<int>& members) {
  // The same on every node, as GroupFor's prefix.
  const std::string key = absl::StrCat(options_.job_key, "/ch", channel, "/", stream_name, "/",
                                       absl::StrJoin(members, ","), "/nccl-id");
  {
    absl::MutexLock lock(&mu_);
    auto it = comm_ids_.find(key);
    if (it != comm_ids_.end()) return it->second;
  }
  // The node of the group's first rank makes the id; the others wait for it
  // (they all reach this collective: the same schedule runs everywhere).
  std::string id;
  if (IsLocalDevice(members.front())) {
    ASSIGN_OR_RETURN(id, inner_.NewCommunicatorId());
    RETURN_IF_ERROR(store_.Set(key, id));
  } else {
    ASSIGN_OR_RETURN(id, store_.Get(key, options_.timeout));
  }
  absl::MutexLock lock(&mu_);
  return comm_ids_.emplace(key, std::move(id)).first->second;
}

absl::StatusOr<engine::BufferRef> SpanningEngine::BarrierScratch(int device) {
  absl::MutexLock lock(&mu_);
  auto it = barrier_scratch_.find(device);
  if (it == barrier_scratch_.end()) {
    ASSIGN_OR_RETURN(const engine::BufferId buffer,
                     inner_.Allocate(LocalDevice(device), sizeof(float)));
    it = barrier_scratch_.emplace(device, buffer).first;
  }
  return engine::BufferRef{it->second, 0, sizeof(float)};
}

std::shared_ptr<SpanningEngine::LazyGroup> SpanningEngine::GroupFor(
    int channel, const std::string& stream_name, const std::vector<int>& members, int rank) {
  // The same on every node: the schedule names the group the same way there.
  const std::string prefix = absl::StrCat(options_.job_key, "/ch", channel, "/", stream_name,
                                          "/", absl::StrJoin(members, ","));
  const std::string key = absl::StrCat(prefix, "#", rank);
  absl::MutexLock lock(&mu_);
  std::shared_ptr<LazyGroup>& group = groups_[key];
  if (group == nullptr) {
    gloo_group::GlooGroupOptions options;
    options.rank = rank;
    options.size = static_cast<int>(members.size());
    options.prefix = prefix;
    options.bind_address = options_.bind_address;
    options.timeout = options_.timeout;
    group = std::make_shared<LazyGroup>(store_, options);
  }
  return group;
}

absl::Status SpanningEngine::Collective(CollectiveOp op, const CollectiveArgs& args) {
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
      case CollectiveOp::kAllGather: return inner_.AllGather(mine);
      case CollectiveOp::kReduceScatter: return inner_.ReduceScatter(mine);
      default: return inner_.AllReduce(mine);
    }
  }
  if (args.algorithm != engine::LibraryAlgorithm::kLibraryChoice) {
    return absl::UnimplementedError(
        "a collective across daemons has the library's own algorithm (no pinned ring or tree)");
  }
  const std::string stream_name = StreamName(args.ranks[0].stream);
  if (inner_.CrossProcessCollectives()) {
    ASSIGN_OR_RETURN(const std::string id,
                     CommunicatorId(args.channel, stream_name, members));
    CollectiveArgs mine = args;
    mine.ranks.clear();
    std::vector<int> global_ranks;
    for (size_t i : local) {
      mine.ranks.push_back(args.ranks[i]);
      mine.ranks.back().device = LocalDevice(args.ranks[i].device);
      global_ranks.push_back(static_cast<int>(i));
    }
    return inner_.CrossProcessCollective(op, id, static_cast<int>(args.ranks.size()),
                                         global_ranks, mine);
  }
  const size_t n = args.ranks.size();
  const size_t es = DTypeSize(args.dtype);
  const size_t send_bytes = (op == CollectiveOp::kReduceScatter ? args.count * n : args.count) * es;
  const size_t recv_bytes = (op == CollectiveOp::kAllGather ? args.count * n : args.count) * es;
  for (size_t i : local) {
    const engine::RankBuffers& rank = args.ranks[i];
    if (rank.send.bytes < send_bytes || rank.recv.bytes < recv_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("collective rank ", i, ": ",
                                                     rank.send.bytes, "/", rank.recv.bytes,
                                                     " bytes given, ", send_bytes, "/",
                                                     recv_bytes, " needed"));
    }
    BufferRef send = rank.send, recv = rank.recv;
    send.bytes = send_bytes;
    recv.bytes = recv_bytes;
    std::shared_ptr<LazyGroup> group =
        GroupFor(args.channel, stream_name, members, static_cast<int>(i));
    RETURN_IF_ERROR(inner_.EnqueueHostWork(
        rank.stream, {send, recv},
        [group, op, dtype = args.dtype,
         count = args.count](const std::vector<uint8_t*>& data) -> absl::Status {
          ASSIGN_OR_RETURN(gloo_group::GlooGroup * g, group->Get());
          switch (op) {
            case CollectiveOp::kAllGather: return g->AllGather(dtype, data[0], data[1], count);
            case CollectiveOp::kReduceScatter: return g->ReduceScatter(dtype, data[0], data[1], count);
            default: return g->AllReduce(dtype, data[0], data[1], count);
          }
        }));
  }
  return absl::OkStatus();
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
  const std::string stream_name = absl::StrCat("barrier-", StreamName(streams[0]));
  if (inner_.CrossProcessCollectives()) {
    // The library's barrier: a one-element all-reduce on a scratch of each rank.
    CollectiveArgs args;
    args.dtype = DType::kF32;
    args.count = 1;
    args.channel = channel;
    for (size_t i = 0; i < devices.size(); ++i) {
      engine::RankBuffers rank;
      rank.device = devices[i];
      rank.stream = streams[i];
      if (IsLocalDevice(devices[i])) {
        ASSIGN_OR_RETURN(const engine::BufferRef scratch, BarrierScratch(devices[i]));
        rank.send = rank.recv = scratch;
      }
      args.ranks.push_back(rank);
    }
    return Collective(CollectiveOp::kAllReduce, args);
  }
  for (size_t i : local) {
    std::shared_ptr<LazyGroup> group =
        GroupFor(channel, stream_name, devices, static_cast<int>(i));
    RETURN_IF_ERROR(inner_.EnqueueHostWork(
        streams[i], {}, [group](const std::vector<uint8_t*>&) -> absl::Status {
          ASSIGN_OR_RETURN(gloo_group::GlooGroup * g, group->Get());
          return g->Barrier();
        }));
  }
  return absl::OkStatus();
}

absl::Status SpanningEngine::SendRecv(int channel, const std::vector<int>& group,
                                      const std::vector<engine::Transfer>& transfers,
                                      bool beside_gemm) {
  std::vector<int> mine;
  for (int d : group) {
    RETURN_IF_ERROR(CheckDevice(d, "send_recv"));
    if (!IsLocalDevice(d)) {
      const bool any_local = std::any_of(group.begin(), group.end(),
                                         [this](int g) { return IsLocalDevice(g); });
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

absl::Status SpanningEngine::PeerCopy(StreamId stream, BufferRef dst, int dst_device,
                                      BufferRef src, int src_device) {
  RETURN_IF_ERROR(CheckDevice(dst_device, "PeerCopy dst"));
  RETURN_IF_ERROR(CheckDevice(src_device, "PeerCopy src"));
  const bool dst_local = IsLocalDevice(dst_device), src_local = IsLocalDevice(src_device);
  if (!dst_local && !src_local) return absl::OkStatus();
  if (dst_local != src_local) {
    return CrossesNodes(absl::StrCat("a peer copy from device ", src_device, " to ", dst_device));
  }
  return inner_.PeerCopy(stream, dst, LocalDevice(dst_device), src, LocalDevice(src_device));
}

absl::Status SpanningEngine::EnqueueHostWork(StreamId stream, const std::vector<BufferRef>& buffers,
                                             HostWork work) {
  if (IsRemoteStream(stream)) return absl::OkStatus();
  return inner_.EnqueueHostWork(stream, buffers, std::move(work));
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
  return inner_.HoldStreams(mine, max_hold_ms);
}

absl::Status SpanningEngine::ReleaseGate(int64_t ticket) {
  if (ticket < 0) return absl::OkStatus();
  return inner_.ReleaseGate(ticket);
}

}  // namespace overlap::cluster
