// How the collectives of a job spanning daemons cross between them. The
// spanning engine (spanning_engine.h) runs a collective whose ranks all live
// on this node on the engine's own collectives, and hands one whose ranks
// live on several nodes to the job's cross-node transport: Gloo over host
// memory (gloo_transport.cc) or the engine's communicators across processes,
// NCCL's (nccl_transport.cc). Which one is chosen by what the engine says it
// can do, never by its name. A new transport (UCC, MPI, ...) is one file
// with its CrossNodeTransport and TransportKind, and its line in
// cross_node_transports.cc.
//
// Every node of a job runs the same schedule, so every node names a group the
// same way (CrossNodeGroup::key) and reaches its collectives in the same order.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "server/cluster/span_placement.h"
#include "server/engine/engine.h"
#include "server/gloo/rendezvous_store.h"

namespace overlap::cluster {

// The ranks of one collective across nodes.
struct CrossNodeGroup {
  int channel = 0;
  std::string stream_name;   // the streams' (role, index), e.g. "comm0"
  std::vector<int> members;  // global devices, in rank order
  // "<job>/ch<channel>/<stream_name>/<members>": the group's name in the job's store.
  std::string key;
};

// A group's key: the same on every node, since the schedule names the group
// the same way there.
std::string CrossNodeGroupKey(const std::string& job_key, int channel,
                              const std::string& stream_name, const std::vector<int>& members);

// What a transport stands on: this node's engine, the job's rendezvous store
// (in the coordinator), and where the job's ranks live.
struct TransportContext {
  engine::Engine& inner;
  gloo_group::RendezvousStore& store;
  const SpanningOptions& options;
};

class CrossNodeTransport {
 public:
  virtual ~CrossNodeTransport() = default;
  // `op` over `group`: `args` over global devices, `local` the indices of this
  // node's ranks in args.ranks (some, not all). Enqueued on each local rank's
  // stream, in its order.
  virtual absl::Status Collective(engine::CollectiveOp op, const CrossNodeGroup& group,
                                  const engine::CollectiveArgs& args,
                                  const std::vector<size_t>& local) = 0;
  // Each local rank's stream (streams[i] for group.members[i]) waits there
  // until every rank of the group has reached it.
  virtual absl::Status Barrier(const CrossNodeGroup& group,
                               const std::vector<engine::StreamId>& streams,
                               const std::vector<size_t>& local) = 0;
};

struct TransportKind {
  std::string name;  // what `overlapctl node` shows: "gloo", "nccl"
  // Said beside the name where it needs saying ("" = nothing).
  std::string note;
  // Whether `engine` can carry it.
  std::function<bool(const engine::Engine& engine)> usable;
  std::function<std::unique_ptr<CrossNodeTransport>(const TransportContext& context)> make;
};

// The kind whose transports are T(context).
template <typename T>
TransportKind KindOf(std::string name, std::function<bool(const engine::Engine&)> usable,
                     std::string note = "") {
  return TransportKind{std::move(name), std::move(note), std::move(usable),
                       [](const TransportContext& context) -> std::unique_ptr<CrossNodeTransport> {
                         return std::make_unique<T>(context);
                       }};
}

// Every transport, the one to prefer first.
const std::vector<TransportKind>& CrossNodeTransports();

// The first of CrossNodeTransports that `engine` can carry; null when none.
const TransportKind* TransportFor(const engine::Engine& engine);

}  // namespace overlap::cluster
