#include "common/graph.h"

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/checked_size.h"
#include "common/enum_names.h"

namespace overlap {

namespace {

// Each table in the order the error for an unknown name lists them.
// clang-format off
constexpr EnumName<OpType> kOpTypeNames[] = {
    {OpType::kAgGemm, "ag_gemm"}, {OpType::kGemmRs, "gemm_rs"}, {OpType::kGemmAr, "gemm_ar"},
    {OpType::kAllGather, "all_gather"}, {OpType::kReduceScatter, "reduce_scatter"},
    {OpType::kAllReduce, "all_reduce"}, {OpType::kGemm, "gemm"}};
constexpr EnumName<OverlapMode> kOverlapModeNames[] = {
    {OverlapMode::kSerial, "serial"}, {OverlapMode::kBulk, "bulk"},
    {OverlapMode::kChunked, "chunked"}, {OverlapMode::kRing, "ring"}, {OverlapMode::kAuto, "auto"}};
constexpr EnumName<Transport> kTransportNames[] = {
    {Transport::kAuto, "auto"}, {Transport::kNccl, "nccl"}, {Transport::kP2p, "p2p"},
    {Transport::kDirect, "direct"}, {Transport::kNone, "none"}};
constexpr EnumName<AllReduceAlgorithm> kAllReduceAlgorithmNames[] = {
    {AllReduceAlgorithm::kDefault, "default"}, {AllReduceAlgorithm::kRing, "ring"},
    {AllReduceAlgorithm::kTree, "tree"}, {AllReduceAlgorithm::kParameterServer, "ps"},
    {AllReduceAlgorithm::kHierarchical, "hierarchical"}, {AllReduceAlgorithm::kAuto, "auto"}};
constexpr EnumName<OpGroup> kOpGroupNames[] = {
    {OpGroup::kTp, "tp"}, {OpGroup::kDp, "dp"}, {OpGroup::kWorld, "world"}};
constexpr EnumName<Scheduler> kSchedulerNames[] = {
    {Scheduler::kStatic, "static"}, {Scheduler::kDynamic, "dynamic"}};
constexpr EnumName<PriorityClass> kPriorityClassNames[] = {
    {PriorityClass::kCritical, "critical"}, {PriorityClass::kDeferred, "deferred"}};
constexpr EnumName<Activation> kActivationNames[] = {
    {Activation::kNone, "none"}, {Activation::kGelu, "gelu"}, {Activation::kSwiglu, "swiglu"}};
constexpr EnumName<Split> kSplitNames[] = {
    {Split::kRows, "split by rows"}, {Split::kCols, "split by columns"},
    {Split::kReplicated, "whole on every rank"}, {Split::kPartial, "a partial sum on every rank"}};
// clang-format on

}  // namespace

std::string OpTypeName(OpType type) { return NameOf(kOpTypeNames, type); }

bool IsCollectiveOnly(OpType type) {
  return type == OpType::kAllGather || type == OpType::kReduceScatter || type == OpType::kAllReduce;
}

bool IsGemmOnly(OpType type) { return type == OpType::kGemm; }

std::string OverlapModeName(OverlapMode mode) { return NameOf(kOverlapModeNames, mode); }

std::string TransportName(Transport transport) { return NameOf(kTransportNames, transport); }

std::string AllReduceAlgorithmName(AllReduceAlgorithm algorithm) {
  return NameOf(kAllReduceAlgorithmNames, algorithm);
}

std::string OpGroupName(OpGroup group) { return NameOf(kOpGroupNames, group); }

absl::StatusOr<OpGroup> ParseOpGroup(absl::string_view name) {
  return ParseName(kOpGroupNames, name, "group");
}

std::string ActivationName(Activation activation) { return NameOf(kActivationNames, activation); }

std::string SchedulerName(Scheduler scheduler) { return NameOf(kSchedulerNames, scheduler); }

absl::StatusOr<Scheduler> ParseScheduler(absl::string_view name) {
  return ParseName(kSchedulerNames, name, "scheduler");
}

std::string PriorityClassName(PriorityClass priority_class) {
  return NameOf(kPriorityClassNames, priority_class);
}

absl::StatusOr<PriorityClass> ParsePriorityClass(absl::string_view name) {
  return ParseName(kPriorityClassNames, name, "priority_class");
}

absl::StatusOr<Activation> ParseActivation(absl::string_view name) {
  return ParseName(kActivationNames, name, "activation");
}

std::string SplitName(Split split) { return NameOf(kSplitNames, split); }

TensorLayout InputLayout(const OpSpec& op) {
  switch (op.type) {
    case OpType::kAgGemm:
      return {op.m, op.k, Split::kRows};
    case OpType::kGemmRs:
    case OpType::kGemmAr:
      return {op.m, op.k, Split::kCols};
    case OpType::kAllGather:
      return {op.m, op.n, Split::kRows};
    case OpType::kReduceScatter:
    case OpType::kAllReduce:
      return {op.m, op.n, Split::kPartial};
    case OpType::kGemm:
      return {op.m, op.k, op.row_parallel ? Split::kCols : Split::kReplicated};
  }
  return {};
}

TensorLayout OutputLayout(const OpSpec& op) {
  switch (op.type) {
    case OpType::kGemm:
      return {op.m, op.n, op.row_parallel ? Split::kPartial : Split::kCols};
    case OpType::kAgGemm:
      return {op.m, op.n, Split::kCols};
    case OpType::kGemmRs:
    case OpType::kReduceScatter:
      return {op.m, op.n, Split::kRows};
    case OpType::kGemmAr:
    case OpType::kAllGather:
    case OpType::kAllReduce:
      return {op.m, op.n, Split::kReplicated};
  }
  return {};
}

std::vector<std::vector<int>> GroupsOf(const Mesh& mesh, OpGroup group, int device_count) {
  std::vector<std::vector<int>> groups;
  // A mesh that does not cover the devices would loop over a tp or dp a user
  // wrote (2^31 groups) and name positions past the devices: one group of them
  // all instead, so that what is built is bounded by device_count.
  if (!mesh.declared() || group == OpGroup::kWorld || !MeshCovers(mesh.tp, mesh.dp, device_count)) {
    groups.emplace_back();
    for (int i = 0; i < device_count; ++i) groups.back().push_back(i);
    return groups;
  }
  if (group == OpGroup::kTp) {
    for (int d = 0; d < mesh.dp; ++d) {
      groups.emplace_back();
      for (int t = 0; t < mesh.tp; ++t) groups.back().push_back(d * mesh.tp + t);
    }
    return groups;
  }
  for (int t = 0; t < mesh.tp; ++t) {
    groups.emplace_back();
    for (int d = 0; d < mesh.dp; ++d) groups.back().push_back(d * mesh.tp + t);
  }
  return groups;
}

bool GroupsCrossNodes(const Mesh& mesh, OpGroup group, int device_count, int devices_per_node) {
  for (const std::vector<int>& ranks : GroupsOf(mesh, group, device_count)) {
    for (int position : ranks) {
      if (position / devices_per_node != ranks.front() / devices_per_node) return true;
    }
  }
  return false;
}

int GroupSize(const Mesh& mesh, OpGroup group, int device_count) {
  if (!mesh.declared() || group == OpGroup::kWorld) return device_count;
  return group == OpGroup::kTp ? mesh.tp : mesh.dp;
}

absl::StatusOr<OpType> ParseOpType(absl::string_view name) {
  return ParseName(kOpTypeNames, name, "op type");
}

absl::StatusOr<OverlapMode> ParseOverlapMode(absl::string_view name) {
  return ParseName(kOverlapModeNames, name, "mode");
}

absl::StatusOr<Transport> ParseTransport(absl::string_view name) {
  return ParseName(kTransportNames, name, "transport");
}

absl::StatusOr<AllReduceAlgorithm> ParseAllReduceAlgorithm(absl::string_view name) {
  return ParseName(kAllReduceAlgorithmNames, name, "algorithm");
}

std::string StoredAllReduceAlgorithm(AllReduceAlgorithm algorithm) {
  return algorithm == AllReduceAlgorithm::kDefault ? "" : AllReduceAlgorithmName(algorithm);
}

absl::StatusOr<AllReduceAlgorithm> ParseStoredAllReduceAlgorithm(absl::string_view stored) {
  if (stored.empty()) return AllReduceAlgorithm::kDefault;
  return ParseAllReduceAlgorithm(stored);
}

LocalShapes LocalShapesFor(const OpSpec& op, int tp) {
  const int64_t t = tp > 0 ? tp : 1;
  LocalShapes s{};
  if (op.type == OpType::kGemm && op.row_parallel) {  // gemm_ar's GEMM, no collective
    s.a_rows = op.m;
    s.a_cols = op.k / t;
    s.w_rows = op.k / t;
    s.w_cols = op.n;
    s.y_rows = op.m;
    s.y_cols = op.n;
    s.gemm_m = op.m;
    s.gemm_n = op.n;
    s.gemm_k = op.k / t;
    return s;
  }
  switch (op.type) {
    case OpType::kGemm:  // ag_gemm's GEMM, on rows the rank already holds
    case OpType::kAgGemm:
      s.a_rows = op.type == OpType::kAgGemm ? op.m / t : op.m;
      s.a_cols = op.k;
      s.w_rows = op.k;
      s.w_cols = op.n / t;
      s.y_rows = op.m;
      s.y_cols = op.n / t;
      s.gemm_m = op.m;
      s.gemm_n = op.n / t;
      s.gemm_k = op.k;
      break;
    case OpType::kGemmRs:
    case OpType::kGemmAr:
      s.a_rows = op.m;
      s.a_cols = op.k / t;
      s.w_rows = op.k / t;
      s.w_cols = op.n;
      s.y_rows = op.type == OpType::kGemmRs ? op.m / t : op.m;
      s.y_cols = op.n;
      s.gemm_m = op.m;
      s.gemm_n = op.n;
      s.gemm_k = op.k / t;
      break;
    case OpType::kAllGather:
    case OpType::kReduceScatter:
    case OpType::kAllReduce:
      s.a_rows = op.type == OpType::kAllGather ? op.m / t : op.m;
      s.a_cols = op.n;
      s.y_rows = op.type == OpType::kReduceScatter ? op.m / t : op.m;
      s.y_cols = op.n;
      break;
  }
  return s;
}

double OpFlops(const OpSpec& op) {
  return 2.0 * static_cast<double>(op.m) * static_cast<double>(op.n) * static_cast<double>(op.k);
}

}  // namespace overlap
