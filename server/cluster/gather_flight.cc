#include "server/cluster/gather_flight.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace overlap::cluster {

bool FlightExplains(absl::StatusCode code) {
  return code == absl::StatusCode::kAborted || code == absl::StatusCode::kDeadlineExceeded ||
         code == absl::StatusCode::kUnavailable;
}

peer::PartFlight PartFlightOf(const flight::FlightRecorder& recorder, const peer::GlobalJobId& id,
                              int max_entries) {
  peer::PartFlight out;
  out.rings = recorder.Snapshot(id.Key());
  const size_t cap = static_cast<size_t>(std::max(max_entries, 1));
  size_t total = 0;
  for (const flight::RankRing& ring : out.rings) total += ring.entries.size();
  if (total <= cap) return out;
  out.truncated = true;
  if (out.rings.size() > cap) out.rings.resize(cap);
  const size_t per_ring = std::max<size_t>(cap / out.rings.size(), 1);
  for (flight::RankRing& ring : out.rings) {
    if (ring.entries.size() <= per_ring) continue;
    ring.entries.erase(ring.entries.begin(),
                       ring.entries.end() - static_cast<std::ptrdiff_t>(per_ring));
  }
  return out;
}

flight::GatheredRings GatherFlight(const ClusterOptions& options, peer::PeerLink& link,
                                   const peer::GlobalJobId& id,
                                   const std::vector<std::string>& nodes) {
  std::vector<absl::StatusOr<peer::PartFlight>> answers(
      nodes.size(), absl::UnimplementedError("this node keeps no flight rings"));
  std::vector<std::thread> calls;
  const peer::FlightRequest request{id};
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (nodes[n] == options.node_name) {
      if (options.flight != nullptr) answers[n] = PartFlightOf(*options.flight, id);
      continue;
    }
    calls.emplace_back([&link, &node = nodes[n], &request, &answer = answers[n]] {
      answer = link.GetPartFlight(node, request, kFlightReadDeadline);
    });
  }
  for (std::thread& call : calls) call.join();
  flight::GatheredRings out;
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (!answers[n].ok()) {
      out.unread.push_back(flight::UnreadNode{nodes[n], answers[n].status().ToString()});
      continue;
    }
    out.truncated = out.truncated || answers[n]->truncated;
    for (flight::RankRing& ring : answers[n]->rings) {
      ring.node = nodes[n];  // whatever the node said: the caller knows whom it asked
      out.rings.push_back(std::move(ring));
    }
  }
  return out;
}

}  // namespace overlap::cluster
