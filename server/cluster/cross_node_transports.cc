#include "server/cluster/cross_node_transport.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace overlap::cluster {

// Each in its own file.
TransportKind NcclTransportKind();
TransportKind GlooTransportKind();

std::string CrossNodeGroupKey(const std::string& job_key, int channel,
                              const std::string& stream_name, const std::vector<int>& members) {
  return absl::StrCat(job_key, "/ch", channel, "/", stream_name, "/", absl::StrJoin(members, ","));
}

const std::vector<TransportKind>& CrossNodeTransports() {
  // The library's own communicators first: they move device memory directly,
  // where Gloo needs the host to address it.
  static const std::vector<TransportKind>* const kinds =
      new std::vector<TransportKind>{NcclTransportKind(), GlooTransportKind()};
  return *kinds;
}

const TransportKind* TransportFor(const engine::Engine& engine) {
  for (const TransportKind& kind : CrossNodeTransports()) {
    if (kind.usable(engine)) return &kind;
  }
  return nullptr;
}

}  // namespace overlap::cluster
