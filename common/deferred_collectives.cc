#include "common/deferred_collectives.h"

#include <map>
#include <string>

#include "common/graph_validator.h"

namespace overlap {

std::vector<bool> DeferredCollectives(const JobSpec& spec) {
  std::vector<bool> deferred(spec.ops.size(), false);
  absl::StatusOr<std::vector<int>> order = TopologicalOrder(spec);
  if (!order.ok()) return deferred;
  std::map<std::string, std::vector<int>> waiters;  // op id -> the ops that wait on it
  for (size_t i = 0; i < spec.ops.size(); ++i) {
    const OpSpec& op = spec.ops[i];
    for (const std::string& id : op.after) waiters[id].push_back(static_cast<int>(i));
    if (!op.input.empty()) waiters[op.input].push_back(static_cast<int>(i));
  }
  // Waiters come later in the order: decided first, from the end.
  for (auto it = order->rbegin(); it != order->rend(); ++it) {
    const OpSpec& op = spec.ops[*it];
    if (!IsCollectiveOnly(op.type)) continue;
    bool only_deferred_wait = true;
    for (int waiter : waiters[op.id]) only_deferred_wait = only_deferred_wait && deferred[waiter];
    deferred[*it] = only_deferred_wait;
  }
  return deferred;
}

}  // namespace overlap
