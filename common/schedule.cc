#include "common/schedule.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace overlap::ops {

std::string Schedule::Name() const {
  std::string name = OverlapModeName(mode);
  if (transport == Transport::kNone) return name;  // a GEMM alone moves nothing
  // Ring without sub-chunks keeps its short name.
  if (mode == OverlapMode::kChunked || (mode == OverlapMode::kRing && chunks > 1)) {
    absl::StrAppend(&name, "/", chunks);
  }
  absl::StrAppend(&name, "/", TransportName(transport));
  if (algorithm != AllReduceAlgorithm::kDefault) {
    absl::StrAppend(&name, "/", AllReduceAlgorithmName(algorithm));
  }
  return name;
}

absl::StatusOr<Schedule> ParseScheduleName(const std::string& name) {
  const std::string plain = name.substr(0, name.find('+'));
  std::vector<std::string> parts = absl::StrSplit(plain, '/');
  auto bad = [&] { return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a schedule")); };
  absl::StatusOr<OverlapMode> mode = ParseOverlapMode(parts[0]);
  if (!mode.ok() || *mode == OverlapMode::kAuto) return bad();
  Schedule s;
  s.mode = *mode;
  size_t next = 1;
  int chunks = 0;
  if (next < parts.size() && absl::SimpleAtoi(parts[next], &chunks)) {
    if (chunks < 1) return bad();
    s.chunks = chunks;
    ++next;
  }
  s.transport = Transport::kNone;
  if (next < parts.size()) {
    absl::StatusOr<Transport> transport = ParseTransport(parts[next++]);
    if (!transport.ok() || *transport == Transport::kAuto) return bad();
    s.transport = *transport;
  }
  if (next < parts.size()) {
    absl::StatusOr<AllReduceAlgorithm> algorithm = ParseAllReduceAlgorithm(parts[next++]);
    if (!algorithm.ok()) return bad();
    s.algorithm = *algorithm;
  }
  if (next != parts.size()) return bad();
  return s;
}

namespace {

// The row where piece c starts.
int64_t PieceStart(int64_t rows, int chunks, int c) {
  if (c >= chunks) return rows;
  if (rows % chunks == 0) return c * (rows / chunks);
  // Each boundary rounds up to the unit, so a piece is within one unit of
  // rows / chunks; the unit stays below an eighth of that.
  const int64_t per_piece = rows / chunks;
  const int64_t unit = per_piece >= 512 ? 64 : per_piece >= 64 ? 8 : 1;
  const int64_t exact_units = (c * rows + chunks * unit - 1) / (chunks * unit);  // ceil
  return std::min(rows, exact_units * unit);
}

}  // namespace

Piece PieceOf(int64_t rows, int chunks, int c) {
  const int64_t start = PieceStart(rows, chunks, c);
  return Piece{start, PieceStart(rows, chunks, c + 1) - start};
}

int64_t MaxPieceRows(int64_t rows, int chunks) {
  int64_t most = 0;
  for (int c = 0; c < chunks; ++c) most = std::max(most, PieceOf(rows, chunks, c).rows);
  return most;
}

namespace {

// Chunk counts worth trying: each chunk must keep enough rows for the GEMM to
// stay efficient, so small shards get fewer chunks. Only counts that divide the
// rows: uneven pieces (PieceOf) run, but on 2x H200 3 and 6 never beat 2 or 4
// (their pieces leave a partial wave of tiles; docs/PERFORMANCE.md).
std::vector<int> ChunkCandidates(int64_t rows_per_rank) {
  std::vector<int> counts;
  for (int c : {2, 4, 8, 16}) {
    if (rows_per_rank % c == 0 && rows_per_rank / c >= 64) counts.push_back(c);
  }
  if (counts.empty() && rows_per_rank % 2 == 0) counts.push_back(2);
  return counts;
}

// The all_reduce layouts an op asks for over `transport`: its own algorithm, or
// with auto the transport's own first, then every one it has.
std::vector<AllReduceAlgorithm> AlgorithmsOver(const OpSpec& op, Transport transport,
                                               bool library_algorithms, bool hierarchical) {
  const bool p2p = transport == Transport::kP2p;
  if (op.algorithm == AllReduceAlgorithm::kDefault && hierarchical) {
    return {AllReduceAlgorithm::kDefault, AllReduceAlgorithm::kHierarchical};
  }
  if (op.algorithm != AllReduceAlgorithm::kAuto) {
    if (op.algorithm == AllReduceAlgorithm::kParameterServer && !p2p) return {};
    return {op.algorithm};
  }
  std::vector<AllReduceAlgorithm> out = {AllReduceAlgorithm::kDefault};
  if (p2p || library_algorithms) {
    out.push_back(AllReduceAlgorithm::kRing);
    out.push_back(AllReduceAlgorithm::kTree);
  }
  if (p2p) out.push_back(AllReduceAlgorithm::kParameterServer);
  if (hierarchical) out.push_back(AllReduceAlgorithm::kHierarchical);
  return out;
}

}  // namespace

bool HierarchicalApplies(const OpSpec& op, const Mesh& mesh) {
  return op.type == OpType::kAllReduce && op.group == OpGroup::kWorld && mesh.declared() &&
         mesh.tp > 1 && mesh.dp > 1;
}

std::vector<Schedule> CandidateSchedules(const OpSpec& op, int tp, bool library_algorithms,
                                         const Mesh& mesh) {
  if (IsGemmOnly(op.type)) return {Schedule{OverlapMode::kSerial, 1, Transport::kNone}};
  // One rank moves nothing, whatever the algorithm.
  if (tp == 1) return {Schedule{OverlapMode::kSerial, 1, Transport::kNccl}};
  std::vector<Transport> transports;
  if (op.transport == Transport::kAuto) {
    // Direct stores are tried only when asked for: on 2x H200 they never beat
    // the copy engines (docs/PERFORMANCE.md, "Direct stores"), and every extra
    // candidate costs autotune time.
    transports = {Transport::kNccl, Transport::kP2p};
  } else {
    transports = {op.transport};
  }
  // A collective alone has nothing to overlap: only its transport is a choice.
  // An all_reduce's algorithm narrows the transports to those that have it.
  if (IsCollectiveOnly(op.type)) {
    std::vector<Schedule> out;
    for (Transport transport : transports) {
      for (AllReduceAlgorithm algorithm :
           AlgorithmsOver(op, transport, library_algorithms, HierarchicalApplies(op, mesh))) {
        out.push_back(Schedule{OverlapMode::kSerial, 1, transport, algorithm});
      }
    }
    return out;
  }
  std::vector<OverlapMode> modes;
  if (op.mode == OverlapMode::kAuto) {
    modes = {OverlapMode::kSerial, OverlapMode::kBulk, OverlapMode::kChunked, OverlapMode::kRing};
  } else {
    modes = {op.mode};
  }
  const int64_t rows_per_rank = op.m / tp;
  std::vector<Schedule> out;
  // Serial over NCCL first: the baseline every other candidate must beat.
  if (op.mode == OverlapMode::kAuto && op.transport == Transport::kAuto) {
    out.push_back(Schedule{OverlapMode::kSerial, 1, Transport::kNccl});
  }
  for (OverlapMode mode : modes) {
    for (Transport transport : transports) {
      // The GEMM's own stores exist only in the fused ring.
      if (transport == Transport::kDirect && mode != OverlapMode::kRing) continue;
      if (mode == OverlapMode::kChunked || mode == OverlapMode::kRing) {
        std::vector<int> counts = ChunkCandidates(rows_per_rank);
        // Ring also runs whole shards; chunked with one chunk is serial on two streams.
        if (mode == OverlapMode::kRing) counts.insert(counts.begin(), 1);
        // Direct gemm_rs has nothing to pipeline after its own block: pieces
        // would only add kernel boundaries (gemm_ar's pieces feed its all-gather).
        if (transport == Transport::kDirect && op.type == OpType::kGemmRs) counts = {1};
        if (op.chunks > 0) counts = {op.chunks};
        for (int c : counts) out.push_back(Schedule{mode, c, transport});
      } else {
        Schedule s{mode, 1, transport};
        bool seen = false;
        for (const Schedule& o : out) seen = seen || o == s;
        if (!seen) out.push_back(s);
      }
    }
  }
  return out;
}

bool CollectivesOnly(const Schedule& schedule) {
  return (schedule.transport == Transport::kNccl || schedule.transport == Transport::kNone) &&
         schedule.mode != OverlapMode::kRing;
}

absl::StatusOr<Schedule> SpanningSchedule(const std::vector<Schedule>& candidates) {
  const Schedule* bulk = nullptr;
  const Schedule* first = nullptr;
  for (const Schedule& s : candidates) {
    if (!CollectivesOnly(s)) continue;
    if (s.mode == OverlapMode::kChunked) return s;
    if (s.mode == OverlapMode::kBulk && bulk == nullptr) bulk = &s;
    if (first == nullptr) first = &s;
  }
  if (bulk != nullptr) return *bulk;
  if (first != nullptr) return *first;
  return absl::InvalidArgumentError(
      "no schedule of this op moves its data through collectives only, which a group "
      "spanning daemons needs: ask for transport nccl and mode serial, bulk or chunked");
}

}  // namespace overlap::ops
