// Checks a parsed job spec against everything that does not need the engine:
// shapes, tensor-parallel divisibility, 64-bit overflow, devices, limits and
// the dependency graph. Thread-safe (pure functions); never throws.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "common/graph.h"

namespace overlap {

// Longest graph name and op id accepted: they are printed in tables and logs.
inline constexpr size_t kMaxNameBytes = 256;
inline constexpr size_t kMaxOpIdBytes = 128;

// A name or id that goes into tables, logs and terminals as it is: not empty,
// at most `max_bytes`, UTF-8, and no control or format characters
// (HasControlCharacters). INVALID_ARGUMENT "<path>: ..." quoting it otherwise.
absl::Status CheckPrintable(absl::string_view path, absl::string_view text, size_t max_bytes);

struct ValidationLimits {
  int device_count = 0;  // devices the backend has on this node
  int max_iterations = 10000;
  // Ops a job may have (config max_ops_per_job). Each op's result is stored as
  // it finishes, and a job's report lists every op.
  int max_ops = 4096;
  // Whether the backend's library collectives take an all-reduce algorithm
  // (NCCL's ring and tree; the host backend's collectives have one).
  bool library_algorithms = true;
};

// The resolved device group (empty `devices` = 0..device_count-1); tp is its
// size, and tp == 1 is allowed (no communication). INVALID_ARGUMENT with a
// one-line message naming the field on error, e.g. `ops[0]: m*n*k overflows 64 bits`.
// Names and ids with control characters (terminal escapes, newlines) or longer
// than kMaxNameBytes / kMaxOpIdBytes are refused; messages quote at most
// kMaxQuotedBytes of what the user wrote.
absl::StatusOr<std::vector<int>> ValidateJobSpec(const JobSpec& spec,
                                                 const ValidationLimits& limits);

// The job's devices in rank order: `devices`, or every device of the node
// (limits.device_count) when it lists none. INVALID_ARGUMENT naming the entry
// for a device the node does not have or one listed twice.
absl::StatusOr<std::vector<int>> ResolveDevices(const JobSpec& spec,
                                                const ValidationLimits& limits);

// Which of the ops ready to go goes next in TopologicalOrder: the smallest
// key(op, done), where done[i] says whether op i is in the order already.
using ReadyKey = std::function<int(int op, const std::vector<bool>& done)>;
// Told each op as it joins the order, before the next is chosen.
using OnPicked = std::function<void(int op)>;

// Indices into spec.ops in dependency order; among the ops ready at once, the
// smallest `key` first (none: all equal), ties in file order.
// INVALID_ARGUMENT on a duplicate id, an unknown `after` or a cycle
// (`ops: dependency cycle fc1 -> fc2 -> fc1`).
absl::StatusOr<std::vector<int>> TopologicalOrder(const JobSpec& spec,
                                                  const ReadyKey& key = nullptr,
                                                  const OnPicked& picked = nullptr);

}  // namespace overlap
