// Library collectives between ranks that share a GPU (config ranks_per_gpu > 1).
// NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), so here copies
// and the reduction kernel do what its collectives and send/recv groups do, on
// the ranks' own streams. Each one is fenced on both sides as NCCL's are in
// effect: no rank's stream starts before every rank reached the call (the
// inputs are ready), and none goes on before every rank's part is done (no
// rank rewrites a buffer a peer still reads). Only correctness is the point:
// ranks of one GPU share its SMs, memory and copy engines.
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/cuda/cuda_check.h"
#include "server/cuda/cuda_engine_impl.h"
#include "server/cuda/scoped_device.h"

namespace overlap::cuda {
namespace {

// Block b of `count` elements split over `parts`: [begin, end).
std::pair<size_t, size_t> Block(size_t count, size_t parts, size_t b) {
  return {count * b / parts, count * (b + 1) / parts};
}

}  // namespace

absl::StatusOr<bool> CudaEngineImpl::NeedsStandIn(const std::vector<int>& devices,
                                                  int channel) const {
  bool shared = false;
  for (size_t i = 0; i < devices.size(); ++i) {
    for (size_t j = i + 1; j < devices.size(); ++j) {
      shared = shared || GpuOf(devices[i]) == GpuOf(devices[j]);
    }
  }
  if (!shared) return false;  // NcclComms::Get checks the group
  RETURN_IF_ERROR(NcclComms::CheckGroup(devices, channel));
  // The stand-ins copy and add across the group's GPUs directly.
  for (int a : devices) {
    for (int b : devices) {
      if (!peer_access_[a][b]) {
        return absl::FailedPreconditionError(absl::StrCat(
            "devices ", a, " and ", b, " share no peer access: the copies that stand in for NCCL ",
            "between ranks of one GPU (ranks_per_gpu) need it across the group"));
      }
    }
  }
  return true;
}

absl::Status CudaEngineImpl::StandInCollective(CollectiveKind kind, DType dtype, size_t count,
                                               const std::vector<RankPtrs>& ranks) {
  const size_t es = DTypeSize(dtype);
  const size_t n = ranks.size();
  std::vector<const StreamSlot*> slots;
  for (const RankPtrs& rank : ranks) slots.push_back(rank.slot);
  // dst = src on rank r's stream; nothing to do where they are the same bytes (in place).
  auto copy = [&](size_t r, char* dst, const char* src, size_t elems) -> absl::Status {
    if (dst == src || elems == 0) return absl::OkStatus();
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, elems * es, cudaMemcpyDefault, ranks[r].stream));
    return absl::OkStatus();
  };
  auto add = [&](size_t r, char* dst, const char* src, size_t elems) -> absl::Status {
    if (elems == 0) return absl::OkStatus();
    CUDA_RETURN_IF_ERROR(LaunchAccumulate(dst, src, ToElemType(dtype), elems, ranks[r].stream));
    return absl::OkStatus();
  };
  auto send = [&](size_t q) { return static_cast<const char*>(ranks[q].send); };
  auto recv = [&](size_t r) { return static_cast<char*>(ranks[r].recv); };

  RETURN_IF_ERROR(FenceStreams(slots));
  for (size_t r = 0; r < n; ++r) {
    ScopedDevice guard(ranks[r].device);
    RETURN_IF_ERROR(guard.status());
    switch (kind) {
      case CollectiveKind::kAllGather:
        for (size_t q = 0; q < n; ++q)
          RETURN_IF_ERROR(copy(r, recv(r) + q * count * es, send(q), count));
        break;
      case CollectiveKind::kReduceScatter: {
        // The own block first: recv may be that block of send (in place), which
        // no other rank reads.
        const size_t offset = r * count * es;
        RETURN_IF_ERROR(copy(r, recv(r), send(r) + offset, count));
        for (size_t q = 0; q < n; ++q) {
          if (q != r) RETURN_IF_ERROR(add(r, recv(r), send(q) + offset, count));
        }
        break;
      }
      case CollectiveKind::kAllReduce: {
        // Reduce-scatter into block r of recv, then (below) gather the blocks.
        // Rank r writes only its block r here and peers read other blocks, so
        // an in-place all-reduce (recv = send) is safe too.
        const auto [begin, end] = Block(count, n, r);
        RETURN_IF_ERROR(copy(r, recv(r) + begin * es, send(r) + begin * es, end - begin));
        for (size_t q = 0; q < n; ++q) {
          if (q != r)
            RETURN_IF_ERROR(add(r, recv(r) + begin * es, send(q) + begin * es, end - begin));
        }
        break;
      }
    }
  }
  if (kind == CollectiveKind::kAllReduce) {
    RETURN_IF_ERROR(FenceStreams(slots));
    for (size_t r = 0; r < n; ++r) {
      ScopedDevice guard(ranks[r].device);
      RETURN_IF_ERROR(guard.status());
      for (size_t q = 0; q < n; ++q) {
        if (q == r) continue;
        const auto [begin, end] = Block(count, n, q);
        RETURN_IF_ERROR(copy(r, recv(r) + begin * es, recv(q) + begin * es, end - begin));
      }
    }
  }
  return FenceStreams(slots);
}

absl::Status CudaEngineImpl::StandInSendRecv(const std::vector<PeerTransfer>& transfers) {
  std::vector<const StreamSlot*> slots;
  for (const PeerTransfer& t : transfers) {
    slots.push_back(t.src_slot);
    slots.push_back(t.dst_slot);
  }
  RETURN_IF_ERROR(FenceStreams(slots));
  for (const PeerTransfer& t : transfers) {
    ScopedDevice guard(t.dst_slot->device);
    RETURN_IF_ERROR(guard.status());
    // cudaMemcpyDefault: the ranks may also sit on different GPUs (with peer access).
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(t.dst, t.src, t.bytes, cudaMemcpyDefault, t.dst_slot->stream.get()));
  }
  return FenceStreams(slots);
}

}  // namespace overlap::cuda
