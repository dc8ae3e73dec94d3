// Collectives across daemons over Gloo: each local rank's collective runs as
// host work in its stream's order (the host backend's buffers are host
// memory), on a Gloo group whose ranks meet in the job's store.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/dtype.h"
#include "common/status_macros.h"
#include "server/cluster/cross_node_transport.h"
#include "server/gloo/gloo_group.h"

namespace overlap::cluster {
namespace {

using engine::BufferRef;
using engine::CollectiveArgs;
using CollectiveOp = engine::CollectiveOp;

// Connects on the first collective, on the stream thread that runs it: every
// node's ranks reach that collective, so every rank of the group is there to
// connect, and nothing waits for a peer before the schedule gets there.
class LazyGroup {
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

class GlooTransport final : public CrossNodeTransport {
 public:
  explicit GlooTransport(const TransportContext& context) : context_(context) {}

  absl::Status Collective(CollectiveOp op, const CrossNodeGroup& group, const CollectiveArgs& args,
                          const std::vector<size_t>& local) override {
    const size_t n = args.ranks.size();
    const size_t es = DTypeSize(args.dtype);
    const size_t send_bytes =
        (op == CollectiveOp::kReduceScatter ? args.count * n : args.count) * es;
    const size_t recv_bytes = (op == CollectiveOp::kAllGather ? args.count * n : args.count) * es;
    for (size_t i : local) {
      const engine::RankBuffers& rank = args.ranks[i];
      if (rank.send.bytes < send_bytes || rank.recv.bytes < recv_bytes) {
        return absl::InvalidArgumentError(absl::StrCat("collective rank ", i, ": ", rank.send.bytes,
                                                       "/", rank.recv.bytes, " bytes given, ",
                                                       send_bytes, "/", recv_bytes, " needed"));
      }
      BufferRef send = rank.send, recv = rank.recv;
      send.bytes = send_bytes;
      recv.bytes = recv_bytes;
      std::shared_ptr<LazyGroup> gloo = GroupFor(group.key, group.members.size(), i);
      RETURN_IF_ERROR(context_.inner.HostWork()->EnqueueHostWork(
          rank.stream, {{send, /*written=*/false}, {recv, /*written=*/true}},
          [gloo, op, dtype = args.dtype,
           count = args.count](const std::vector<uint8_t*>& data) -> absl::Status {
            ASSIGN_OR_RETURN(gloo_group::GlooGroup * g, gloo->Get());
            switch (op) {
              case CollectiveOp::kAllGather:
                return g->AllGather(dtype, data[0], data[1], count);
              case CollectiveOp::kReduceScatter:
                return g->ReduceScatter(dtype, data[0], data[1], count);
              default:
                return g->AllReduce(dtype, data[0], data[1], count);
            }
          }));
    }
    return absl::OkStatus();
  }

  absl::Status Barrier(const CrossNodeGroup& group, const std::vector<engine::StreamId>& streams,
                       const std::vector<size_t>& local) override {
    // A group of its own: a barrier is no collective of the streams' group.
    const std::string key = CrossNodeGroupKey(context_.options.job_key, group.channel,
                                              "barrier-" + group.stream_name, group.members);
    for (size_t i : local) {
      std::shared_ptr<LazyGroup> gloo = GroupFor(key, group.members.size(), i);
      RETURN_IF_ERROR(context_.inner.HostWork()->EnqueueHostWork(
          streams[i], {}, [gloo](const std::vector<uint8_t*>&) -> absl::Status {
            ASSIGN_OR_RETURN(gloo_group::GlooGroup * g, gloo->Get());
            return g->Barrier();
          }));
    }
    return absl::OkStatus();
  }

 private:
  // Rank `rank` of the group named `prefix` in the store.
  std::shared_ptr<LazyGroup> GroupFor(const std::string& prefix, size_t size, size_t rank) {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<LazyGroup>& group = groups_[absl::StrCat(prefix, "#", rank)];
    if (group == nullptr) {
      gloo_group::GlooGroupOptions options;
      options.rank = static_cast<int>(rank);
      options.size = static_cast<int>(size);
      options.prefix = prefix;
      options.bind_address = context_.options.bind_address;
      options.timeout = context_.options.timeout;
      group = std::make_shared<LazyGroup>(context_.store, options);
    }
    return group;
  }

  const TransportContext context_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<LazyGroup>> groups_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

TransportKind GlooTransportKind() {
  return KindOf<GlooTransport>(
      "gloo", [](const engine::Engine& engine) { return engine.HostWork() != nullptr; });
}

}  // namespace overlap::cluster
