// Fuzz target: the size arithmetic of a graph, reached with large numbers
// that text rarely carries. The input is read as numbers (each either one of
// the boundary values below, picked by a byte, or 8 raw bytes): a device
// count, a mesh, iterations, and up to three ops' types, shapes, chunks and
// groups, straight into a JobSpec, past the parser's own bounds. Then:
//  - CheckedMul and MeshRanks agree with 128-bit arithmetic;
//  - ValidateJobSpec refuses with INVALID_ARGUMENT only;
//  - the group lists built from any mesh, valid or not, hold exactly the job's
//    devices (a mesh whose tp x dp wrapped once built 715827883 groups);
//  - for a graph that passes: the mesh covers the devices in 64 bits, every
//    op's groups split the devices evenly, each rank's tensors have byte sizes
//    that fit, and the planner predicts each candidate schedule (or says it
//    cannot) with a bounded number of pieces.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/checked_size.h"
#include "common/graph.h"
#include "common/graph_validator.h"
#include "common/planner/cost_model.h"
#include "common/planner/planner.h"
#include "common/schedule.h"
#include "tests/fuzz/fuzz_check.h"

namespace overlap::fuzz {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kBoundaries[] = {0,
                                   1,
                                   2,
                                   -1,
                                   6,
                                   8,
                                   64,
                                   65536,
                                   65537,
                                   715827883,   // 2^32 / 6, rounded up
                                   1431655766,  // 2^32 / 3, rounded up
                                   (int64_t{1} << 31) - 1,
                                   int64_t{1} << 31,
                                   (int64_t{1} << 32) - 1,
                                   int64_t{1} << 32,
                                   int64_t{1} << 62,
                                   kInt64Max,
                                   kInt64Min};
constexpr size_t kBoundaryCount = sizeof(kBoundaries) / sizeof(kBoundaries[0]);

// Numbers from the input; past its end, zeros.
class Numbers {
 public:
  Numbers(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Byte() { return at_ < size_ ? data_[at_++] : 0; }
  int64_t Next() {
    const uint8_t pick = Byte();
    if (pick < 2 * kBoundaryCount) return kBoundaries[pick % kBoundaryCount];
    uint64_t raw = 0;
    for (int i = 0; i < 8; ++i) raw = (raw << 8) | Byte();
    int64_t value = 0;
    std::memcpy(&value, &raw, sizeof(value));
    return value;
  }
  int NextInt() {  // as a JobSpec's int fields hold it: the low 32 bits
    return static_cast<int>(static_cast<int32_t>(static_cast<uint32_t>(Next())));
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

void CheckArithmetic(int64_t a, int64_t b) {
  const __int128 exact = static_cast<__int128>(a) * b;
  const absl::StatusOr<int64_t> product = CheckedMul(a, b, "x");
  const bool fits = exact >= kInt64Min && exact <= kInt64Max;
  FUZZ_CHECK(product.ok() == fits);
  if (fits) FUZZ_CHECK(*product == static_cast<int64_t>(exact));
  if (!fits) FUZZ_CHECK(absl::IsInvalidArgument(product.status()));
  const absl::StatusOr<int> ranks = MeshRanks(a, b);
  FUZZ_CHECK(ranks.ok() == (a >= 1 && b >= 1 && exact <= kMaxMeshRanks));
  if (ranks.ok()) FUZZ_CHECK(*ranks == static_cast<int64_t>(exact));
}

// The groups of `group` hold each of `device_count` positions exactly once.
void CheckGroups(const Mesh& mesh, OpGroup group, int device_count) {
  const std::vector<std::vector<int>> groups = GroupsOf(mesh, group, device_count);
  std::set<int> seen;
  size_t total = 0;
  for (const std::vector<int>& ranks : groups) {
    total += ranks.size();
    for (int position : ranks) {
      FUZZ_CHECK(position >= 0 && position < device_count);
      seen.insert(position);
    }
  }
  FUZZ_CHECK(total == static_cast<size_t>(device_count) && seen.size() == total);
}

planner::Calibration FixedCalibration() {
  planner::Calibration c;
  c.identity = {"fuzz", "host", "0", "0", "0", "bf16"};
  c.gemms = {{1024, 512, 1024, 1.0}, {2048, 512, 1024, 1.8}};
  c.transfers = {{Collective::kAllGather, Transport::kNccl, 2, {{1 << 21, 0.5}, {1 << 23, 2.0}}}};
  c.gemm_slowdown = {{Transport::kNccl, 1.2}};
  return c;
}

void CheckValidGraph(const JobSpec& spec, int device_count) {
  if (spec.mesh.declared()) FUZZ_CHECK(MeshCovers(spec.mesh.tp, spec.mesh.dp, device_count));
  static const planner::CostModel model(FixedCalibration(), {});
  for (const OpSpec& op : spec.ops) {
    const int size = GroupSize(spec.mesh, op.group, device_count);
    const std::vector<std::vector<int>> groups = GroupsOf(spec.mesh, op.group, device_count);
    FUZZ_CHECK(size >= 1 && !groups.empty() && groups[0].size() == static_cast<size_t>(size));
    const LocalShapes local = LocalShapesFor(op, size);
    const int64_t element = static_cast<int64_t>(DTypeSize(spec.dtype));
    for (const auto& [rows, cols] : {std::pair{local.a_rows, local.a_cols},
                                     {local.w_rows, local.w_cols},
                                     {local.y_rows, local.y_cols}}) {
      const absl::StatusOr<int64_t> elements = CheckedMul(rows, cols, "local");
      FUZZ_CHECK(elements.ok() && CheckedBytes(*elements, element, "local").ok());
    }
    const std::vector<ops::Schedule> candidates =
        ops::CandidateSchedules(op, size, true, spec.mesh);
    const planner::OpPlan plan =
        planner::PlanOp(model, op, size, spec.dtype, candidates, /*nodes=*/1);
    for (const planner::SchedulePrediction& p : plan.predicted) {
      FUZZ_CHECK(p.pieces >= 1 && p.pieces <= planner::kMaxPlannedPieces);
    }
  }
}

}  // namespace
}  // namespace overlap::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace overlap;
  fuzz::Numbers in(data, size);
  const int device_count = 1 + in.Byte() % 8;
  JobSpec spec;
  spec.name = "sizes";
  spec.mesh.tp = in.NextInt();
  spec.mesh.dp = in.NextInt();
  spec.iterations = in.NextInt();
  spec.warmup = in.NextInt();
  spec.dtype = static_cast<DType>(in.Byte() % 4);
  const int ops = 1 + in.Byte() % 3;
  for (int i = 0; i < ops; ++i) {
    OpSpec op;
    op.id = std::string(1, static_cast<char>('a' + i));
    op.type = static_cast<OpType>(in.Byte() % 7);
    op.mode = static_cast<OverlapMode>(in.Byte() % 5);
    op.transport = static_cast<Transport>(in.Byte() % 5);
    op.group = static_cast<OpGroup>(in.Byte() % 3);
    op.row_parallel = in.Byte() % 2;
    op.m = in.Next();
    op.k = IsCollectiveOnly(op.type) ? 0 : in.Next();
    op.n = in.Next();
    op.chunks = in.NextInt();
    spec.ops.push_back(op);
  }
  fuzz::CheckArithmetic(spec.mesh.tp, spec.mesh.dp);
  fuzz::CheckArithmetic(spec.ops[0].m, spec.ops[0].k);
  for (OpGroup group : {OpGroup::kTp, OpGroup::kDp, OpGroup::kWorld}) {
    fuzz::CheckGroups(spec.mesh, group, device_count);
  }
  ValidationLimits limits;
  limits.device_count = device_count;
  limits.max_iterations = std::numeric_limits<int>::max();
  const absl::StatusOr<std::vector<int>> devices = ValidateJobSpec(spec, limits);
  if (!devices.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(devices.status()));
    return 0;
  }
  fuzz::CheckValidGraph(spec, static_cast<int>(devices->size()));
  return 0;
}
