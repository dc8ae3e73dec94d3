// A schedule: how one layer op overlaps its collective with its GEMM.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "common/graph.h"

namespace overlap::ops {

struct Schedule {
  OverlapMode mode = OverlapMode::kSerial;  // never kAuto here: auto resolves to one of these
  int chunks = 1;                           // pieces, chunked and ring only
  Transport transport = Transport::kNccl;   // never kAuto here
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kDefault;  // all_reduce only

  // e.g. "chunked/4/p2p"; "serial" for a GEMM alone; "serial/nccl/tree" for an
  // all_reduce with an algorithm.
  std::string Name() const;
  bool operator==(const Schedule& other) const {
    return mode == other.mode && chunks == other.chunks && transport == other.transport &&
           algorithm == other.algorithm;
  }
};

// The schedule a Name() names ("ring/2/p2p", "serial/nccl/tree", "bulk/p2p+graph":
// a "+..." suffix is ignored). INVALID_ARGUMENT for any other text.
absl::StatusOr<Schedule> ParseScheduleName(const std::string& name);

// Piece c of `rows` rows cut into `chunks` pieces (chunked and ring modes):
// equal where `chunks` divides `rows`; otherwise the boundaries sit on whole
// multiples of 64 rows (8 for small pieces), so the GEMM pieces keep whole
// tiles, and the earlier pieces take the remainder: the last piece, whose
// transfer or GEMM no later one can hide, is the smallest.
struct Piece {
  int64_t row = 0;
  int64_t rows = 0;
};
Piece PieceOf(int64_t rows, int chunks, int c);
int64_t MaxPieceRows(int64_t rows, int chunks);

// The schedules `auto` chooses among for `op` at degree `tp` (the mode and
// transport fields of `op` narrow the set when they are not auto). Serial with
// the NCCL transport is always first: it is the fallback. An explicit mode with
// transport auto still tunes the transport. A gemm op has one: serial, no transport.
// An all_reduce with algorithm auto has every layout of each transport, NCCL's
// pinned ones only where the backend pins them (`library_algorithms`).
// A world all_reduce over a mesh with tp > 1 and dp > 1 also has the
// hierarchical layout, tried beside the flat ones unless the op names another.
std::vector<Schedule> CandidateSchedules(const OpSpec& op, int tp, bool library_algorithms = true,
                                         const Mesh& mesh = {});
// Whether `op` may run hierarchical over `mesh`.
bool HierarchicalApplies(const OpSpec& op, const Mesh& mesh);

// What a job that spans daemons runs for `op` among `candidates` (never
// empty): no autotune there, since ranks that timed differently would choose
// differently and hang, so every node applies this same rule. It keeps to
// schedules that move data through collectives only (the NCCL transport;
// ring needs point-to-point and p2p and direct the peer's memory), preferring
// chunked (the fewest pieces: the least per-collective latency across nodes),
// then bulk, then the first (for an all_reduce, the flat layout unless the op
// names another). INVALID_ARGUMENT when none moves data through collectives
// only.
absl::StatusOr<Schedule> SpanningSchedule(const std::vector<Schedule>& candidates);
// Whether `schedule` moves its data through collectives only.
bool CollectivesOnly(const Schedule& schedule);

}  // namespace overlap::ops
