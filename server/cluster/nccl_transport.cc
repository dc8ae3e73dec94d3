// Collectives across daemons on the engine's communicators across processes
// (NCCL on the CUDA backend): a group's communicator is named by an id that
// the node of its first rank makes and puts in the job's store, and each node
// issues every collective on it with its own ranks.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "server/cluster/cross_node_transport.h"

namespace overlap::cluster {
namespace {

using engine::CollectiveArgs;
using CollectiveOp = engine::CollectiveOp;

class NcclTransport final : public CrossNodeTransport {
 public:
  explicit NcclTransport(const TransportContext& context) : context_(context) {}

  ~NcclTransport() override {
    absl::MutexLock lock(&mu_);
    for (const auto& [device, buffer] : barrier_scratch_) context_.inner.Free(buffer);
  }

  absl::Status Collective(CollectiveOp op, const CrossNodeGroup& group, const CollectiveArgs& args,
                          const std::vector<size_t>& local) override {
    ASSIGN_OR_RETURN(const std::string id, CommunicatorId(group));
    CollectiveArgs mine = args;
    mine.ranks.clear();
    std::vector<int> global_ranks;
    for (size_t i : local) {
      mine.ranks.push_back(args.ranks[i]);
      mine.ranks.back().device = context_.options.placement.LocalDevice(args.ranks[i].device);
      global_ranks.push_back(static_cast<int>(i));
    }
    return context_.inner.CrossProcess()->CrossProcessCollective(
        op, id, static_cast<int>(args.ranks.size()), global_ranks, mine);
  }

  // The library's barrier: a one-element all-reduce on a scratch of each rank.
  absl::Status Barrier(const CrossNodeGroup& group, const std::vector<engine::StreamId>& streams,
                       const std::vector<size_t>& local) override {
    CollectiveArgs args;
    args.dtype = DType::kF32;
    args.count = 1;
    args.channel = group.channel;
    for (size_t i = 0; i < group.members.size(); ++i) {
      engine::RankBuffers rank;
      rank.device = group.members[i];
      rank.stream = streams[i];
      args.ranks.push_back(rank);
    }
    for (size_t i : local) {
      ASSIGN_OR_RETURN(const engine::BufferRef scratch, BarrierScratch(group.members[i]));
      args.ranks[i].send = args.ranks[i].recv = scratch;
    }
    return Collective(CollectiveOp::kAllReduce, group, args, local);
  }

 private:
  // The id of the group's communicator, made on the node of its first rank
  // and read from the store by the others (they all reach this collective:
  // the same schedule runs everywhere).
  absl::StatusOr<std::string> CommunicatorId(const CrossNodeGroup& group) {
    const std::string key = absl::StrCat(group.key, "/nccl-id");
    {
      absl::MutexLock lock(&mu_);
      auto it = comm_ids_.find(key);
      if (it != comm_ids_.end()) return it->second;
    }
    const SpanPlacement& placement = context_.options.placement;
    std::string id;
    if (placement.NodeOf(group.members.front()) == placement.node_index) {
      ASSIGN_OR_RETURN(id, context_.inner.CrossProcess()->NewCommunicatorId());
      RETURN_IF_ERROR(context_.store.Set(key, id));
    } else {
      ASSIGN_OR_RETURN(id, context_.store.Get(key, context_.options.timeout));
    }
    absl::MutexLock lock(&mu_);
    return comm_ids_.emplace(key, std::move(id)).first->second;
  }

  // A float of global device `device` (this node's) that barriers reduce.
  absl::StatusOr<engine::BufferRef> BarrierScratch(int device) {
    absl::MutexLock lock(&mu_);
    auto it = barrier_scratch_.find(device);
    if (it == barrier_scratch_.end()) {
      ASSIGN_OR_RETURN(
          const engine::BufferId buffer,
          context_.inner.Allocate(context_.options.placement.LocalDevice(device), sizeof(float)));
      it = barrier_scratch_.emplace(device, buffer).first;
    }
    return engine::BufferRef{it->second, 0, sizeof(float)};
  }

  const TransportContext context_;
  absl::Mutex mu_;
  std::map<std::string, std::string> comm_ids_ ABSL_GUARDED_BY(mu_);
  std::map<int, engine::BufferId> barrier_scratch_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

TransportKind NcclTransportKind() {
  return KindOf<NcclTransport>(
      "nccl", [](const engine::Engine& engine) { return engine.CrossProcess() != nullptr; },
      "experimental: NCCL between daemons has not yet been verified on two GPUs");
}

}  // namespace overlap::cluster
