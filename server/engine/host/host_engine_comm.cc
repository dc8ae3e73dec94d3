// The host engine's collectives and point-to-point groups. Each participating
// stream runs a part: rendezvous (every rank's earlier work is done, so every
// input is ready), compute this rank's output into scratch from the others'
// inputs, rendezvous again (no input is read any more), then write the output.
// The scratch makes any aliasing (in-place collectives) safe.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/engine/host/host_engine_impl.h"
#include "server/engine/host/host_kernels.h"

namespace overlap::engine::host {
namespace {

const char* KindName(int kind) {
  static const char* names[] = {"all_gather", "reduce_scatter", "all_reduce"};
  return names[kind];
}

absl::Status CheckChannel(int channel, absl::string_view op) {
  if (channel < 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": negative channel ", channel));
  }
  return absl::OkStatus();
}

// What a collective's arguments must be before its ranks are looked at.
absl::Status CheckCollective(bool gathers, const CollectiveArgs& args, const char* op) {
  RETURN_IF_ERROR(CheckChannel(args.channel, op));
  if (args.algorithm != LibraryAlgorithm::kLibraryChoice) {
    return absl::UnimplementedError(absl::StrCat(
        op, ": the host backend's collectives have one algorithm (ring and tree are NCCL's)"));
  }
  if (args.dtype == DType::kFP8 && !gathers) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": fp8 is gathered, never summed"));
  }
  if (args.ranks.empty()) return absl::InvalidArgumentError(absl::StrCat(op, ": no ranks"));
  return absl::OkStatus();
}

// One rank's output of a collective into `out`: every input's `count`
// elements side by side (gathers), or their sum starting `offset` bytes into
// each input.
void GatherOrSum(bool gathers, const std::vector<const uint8_t*>& inputs, size_t offset,
                 DType dtype, size_t count, uint8_t* out) {
  const size_t bytes = count * DTypeSize(dtype);
  if (gathers) {
    for (size_t r = 0; r < inputs.size(); ++r) std::memcpy(out + r * bytes, inputs[r], bytes);
    return;
  }
  std::vector<const uint8_t*> blocks;
  for (const uint8_t* input : inputs) blocks.push_back(input + offset);
  SumKernel(blocks, dtype, count, out);
}

// Transfer t of a send/recv group writes a range no earlier transfer writes.
absl::Status CheckDstApart(const std::vector<Transfer>& transfers, size_t t,
                           const std::string& what) {
  const Transfer& x = transfers[t];
  const Region dst_region = Region::Contiguous(x.dst.offset, x.dst.bytes);
  for (size_t u = 0; u < t; ++u) {
    if (transfers[u].dst.buffer == x.dst.buffer &&
        Region::Contiguous(transfers[u].dst.offset, transfers[u].dst.bytes).Overlaps(dst_region)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": dst overlaps the dst of transfer ", u));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status HostEngine::AllGather(const CollectiveArgs& args) {
  return Collective(CollectiveKind::kAllGather, args);
}

absl::Status HostEngine::ReduceScatter(const CollectiveArgs& args) {
  return Collective(CollectiveKind::kReduceScatter, args);
}

absl::Status HostEngine::AllReduce(const CollectiveArgs& args) {
  return Collective(CollectiveKind::kAllReduce, args);
}

absl::Status HostEngine::Collective(CollectiveKind kind, const CollectiveArgs& args) {
  const char* op = KindName(static_cast<int>(kind));
  const bool gathers = kind == CollectiveKind::kAllGather;
  RETURN_IF_ERROR(CheckCollective(gathers, args, op));
  const size_t n = args.ranks.size();
  const size_t es = DTypeSize(args.dtype);
  const size_t send_count = kind == CollectiveKind::kReduceScatter ? args.count * n : args.count;
  const size_t recv_count = kind == CollectiveKind::kAllGather ? args.count * n : args.count;

  std::vector<StreamId> streams;
  std::vector<Range> sends, recvs;
  std::vector<Access> accesses;
  std::set<int> devices;
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < n; ++i) {
    const RankBuffers& rank = args.ranks[i];
    const std::string what = absl::StrCat(op, " rank ", i);
    RETURN_IF_ERROR(CheckDevice(rank.device, what));
    if (!devices.insert(rank.device).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": device ", rank.device, " appears twice"));
    }
    ASSIGN_OR_RETURN(const Stream* s, FindStream(rank.stream, what));
    if (s->device != rank.device) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": stream ", s->name, " is not on device ", rank.device));
    }
    const struct {
      const BufferRef& ref;
      size_t count;
      const char* name;
      std::vector<Range>& out;
    } parts[] = {{rank.send, send_count, "send", sends}, {rank.recv, recv_count, "recv", recvs}};
    for (const auto& part : parts) {
      const std::string part_what = absl::StrCat(what, " ", part.name);
      if (part.ref.bytes < part.count * es) {
        return absl::InvalidArgumentError(
            absl::StrCat(part_what, ": ", part.ref.bytes, " bytes given, ", part.count, " ",
                         DTypeName(args.dtype), " elements (", part.count * es, " bytes) needed"));
      }
      // Only the bytes the collective touches count, for ranges and hazards.
      BufferRef used = part.ref;
      used.bytes = part.count * es;
      ASSIGN_OR_RETURN(Range range, ResolveTyped(used, rank.device, args.dtype, part_what));
      part.out.push_back(range);
    }
    streams.push_back(rank.stream);
    accesses.push_back({rank.send.buffer, Region::Contiguous(rank.send.offset, send_count * es),
                        false, rank.stream});
    accesses.push_back({rank.recv.buffer, Region::Contiguous(rank.recv.offset, recv_count * es),
                        true, rank.stream});
  }
  absl::Status result;
  if (!PassFailurePoint(op, streams, &result)) return result;
  RETURN_IF_ERROR(CheckHazards(streams, accesses, op));
  if (args.count == 0) return absl::OkStatus();

  auto rendezvous = std::make_shared<Rendezvous>(static_cast<int>(n));
  auto inputs = std::make_shared<const std::vector<Range>>(std::move(sends));
  const DType dtype = args.dtype;
  const size_t count = args.count;
  for (size_t i = 0; i < n; ++i) {
    // A reduce-scatter's rank i sums block i of every input.
    const size_t offset = kind == CollectiveKind::kReduceScatter ? i * count * es : 0;
    streams_[streams[i]].worker->Enqueue(
        [gathers, offset, dtype, count, rendezvous, inputs, recv = recvs[i]] {
          rendezvous->ArriveAndWait();
          std::vector<uint8_t> scratch(recv.bytes);
          std::vector<const uint8_t*> input_data;
          for (const Range& input : *inputs) input_data.push_back(input.data());
          GatherOrSum(gathers, input_data, offset, dtype, count, scratch.data());
          rendezvous->ArriveAndWait();
          std::memcpy(recv.data(), scratch.data(), recv.bytes);
        });
  }
  return absl::OkStatus();
}

absl::Status HostEngine::SendRecv(int channel, const std::vector<int>& group,
                                  const std::vector<Transfer>& transfers,
                                  bool /*beside_gemm: no SMs to budget here*/) {
  RETURN_IF_ERROR(CheckChannel(channel, "send_recv"));
  std::set<int> members;
  for (int d : group) {
    RETURN_IF_ERROR(CheckDevice(d, "send_recv group"));
    if (!members.insert(d).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("send_recv group: device ", d, " appears twice"));
    }
  }
  struct Copy {
    StreamId stream;  // the destination's stream performs the copy
    Range from, to;
  };
  std::vector<Copy> copies;
  std::vector<Access> accesses;
  std::vector<StreamId> streams;
  absl::MutexLock lock(&mu_);
  for (size_t t = 0; t < transfers.size(); ++t) {
    const Transfer& x = transfers[t];
    const std::string what = absl::StrCat("send_recv transfer ", t);
    for (int device : {x.src_device, x.dst_device}) {
      if (!members.count(device)) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": device ", device, " is not in the group"));
      }
    }
    ASSIGN_OR_RETURN(const Stream* src_stream, FindStream(x.src_stream, what + " src"));
    ASSIGN_OR_RETURN(const Stream* dst_stream, FindStream(x.dst_stream, what + " dst"));
    if (src_stream->device != x.src_device || dst_stream->device != x.dst_device) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": streams ", src_stream->name, " -> ",
                                                     dst_stream->name, " do not match devices ",
                                                     x.src_device, " -> ", x.dst_device));
    }
    if (x.src.bytes != x.dst.bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": src has ", x.src.bytes, " bytes but dst has ", x.dst.bytes));
    }
    ASSIGN_OR_RETURN(Range from, Resolve(x.src, x.src_device, what + " src"));
    ASSIGN_OR_RETURN(Range to, Resolve(x.dst, x.dst_device, what + " dst"));
    RETURN_IF_ERROR(CheckDstApart(transfers, t, what));
    copies.push_back({x.dst_stream, from, to});
    accesses.push_back(
        {x.src.buffer, Region::Contiguous(x.src.offset, x.src.bytes), false, x.src_stream});
    accesses.push_back(
        {x.dst.buffer, Region::Contiguous(x.dst.offset, x.dst.bytes), true, x.dst_stream});
    for (StreamId s : {x.src_stream, x.dst_stream}) {
      if (std::find(streams.begin(), streams.end(), s) == streams.end()) streams.push_back(s);
    }
  }
  if (transfers.empty()) return absl::OkStatus();
  absl::Status result;
  if (!PassFailurePoint("send_recv", streams, &result)) return result;
  RETURN_IF_ERROR(CheckHazards(streams, accesses, "send_recv"));

  auto rendezvous = std::make_shared<Rendezvous>(static_cast<int>(streams.size()));
  for (StreamId stream : streams) {
    std::vector<Copy> mine;
    for (const Copy& copy : copies) {
      if (copy.stream == stream) mine.push_back(copy);
    }
    streams_[stream].worker->Enqueue([rendezvous, mine = std::move(mine)] {
      rendezvous->ArriveAndWait();
      std::vector<std::vector<uint8_t>> scratch;
      for (const Copy& copy : mine) {
        scratch.emplace_back(copy.from.data(), copy.from.data() + copy.from.bytes);
      }
      rendezvous->ArriveAndWait();
      for (size_t c = 0; c < mine.size(); ++c) {
        std::memcpy(mine[c].to.data(), scratch[c].data(), scratch[c].size());
      }
    });
  }
  return absl::OkStatus();
}

absl::Status HostEngine::Barrier(int channel, const std::vector<int>& devices,
                                 const std::vector<StreamId>& streams) {
  RETURN_IF_ERROR(CheckChannel(channel, "barrier"));
  if (devices.size() != streams.size() || devices.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("barrier: ", devices.size(), " devices and ",
                                                   streams.size(),
                                                   " streams (need one stream per device)"));
  }
  std::set<int> seen;
  for (size_t i = 0; i < devices.size(); ++i) {
    RETURN_IF_ERROR(CheckDevice(devices[i], "barrier"));
    if (!seen.insert(devices[i]).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("barrier: device ", devices[i], " appears twice"));
    }
    ASSIGN_OR_RETURN(const Stream* s, FindStream(streams[i], "barrier"));
    if (s->device != devices[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("barrier: stream ", s->name, " is not on device ", devices[i]));
    }
  }
  absl::MutexLock lock(&mu_);
  absl::Status result;
  if (!PassFailurePoint("barrier", streams, &result)) return result;
  RETURN_IF_ERROR(CheckHazards(streams, {}, "barrier"));
  auto rendezvous = std::make_shared<Rendezvous>(static_cast<int>(streams.size()));
  for (StreamId stream : streams) {
    streams_[stream].worker->Enqueue([rendezvous] { rendezvous->ArriveAndWait(); });
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> HostEngine::HoldStreams(const std::vector<StreamId>& streams,
                                                double max_hold_ms) {
  if (!options_.launch_gate) {
    return absl::FailedPreconditionError("host backend: launch gates are off");
  }
  if (!(max_hold_ms > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("hold: max_hold_ms ", max_hold_ms));
  }
  std::vector<const Stream*> held;
  for (StreamId stream : streams) {
    ASSIGN_OR_RETURN(const Stream* s, FindStream(stream, "hold"));
    held.push_back(s);
  }
  const int64_t ticket = gate_->NextTicket();
  const auto max_hold = std::chrono::microseconds(static_cast<int64_t>(max_hold_ms * 1000));
  absl::MutexLock lock(&mu_);
  for (const Stream* s : held) {
    s->worker->Enqueue([gate = gate_, ticket, device = s->device, max_hold] {
      gate->Hold(ticket, device, max_hold);
    });
  }
  return ticket;
}

absl::Status HostEngine::ReleaseGate(int64_t ticket) {
  if (!options_.launch_gate) {
    return absl::FailedPreconditionError("host backend: launch gates are off");
  }
  gate_->Open(ticket);
  return absl::OkStatus();
}

int64_t HostEngine::GateTimeouts(int device) const {
  return device >= 0 && device < options_.device_count ? gate_->Timeouts(device) : 0;
}

}  // namespace overlap::engine::host
