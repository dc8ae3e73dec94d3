#include "common/graph.h"

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/checked_size.h"

namespace overlap {

std::string OpTypeName(OpType type) {
  switch (type) {
    case OpType::kAgGemm:
      return "ag_gemm";
    case OpType::kGemmRs:
      return "gemm_rs";
    case OpType::kGemmAr:
      return "gemm_ar";
    case OpType::kAllGather:
      return "all_gather";
    case OpType::kReduceScatter:
      return "reduce_scatter";
    case OpType::kAllReduce:
      return "all_reduce";
    case OpType::kGemm:
      return "gemm";
  }
  return "unknown";
}

bool IsCollectiveOnly(OpType type) {
  return type == OpType::kAllGather || type == OpType::kReduceScatter || type == OpType::kAllReduce;
}

bool IsGemmOnly(OpType type) { return type == OpType::kGemm; }

std::string OverlapModeName(OverlapMode mode) {
  switch (mode) {
    case OverlapMode::kSerial:
      return "serial";
    case OverlapMode::kBulk:
      return "bulk";
    case OverlapMode::kChunked:
      return "chunked";
    case OverlapMode::kRing:
      return "ring";
    case OverlapMode::kAuto:
      return "auto";
  }
  return "unknown";
}

std::string TransportName(Transport transport) {
  switch (transport) {
    case Transport::kAuto:
      return "auto";
    case Transport::kNccl:
      return "nccl";
    case Transport::kP2p:
      return "p2p";
    case Transport::kDirect:
      return "direct";
    case Transport::kNone:
      return "none";
  }
  return "unknown";
}

std::string AllReduceAlgorithmName(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::kDefault:
      return "default";
    case AllReduceAlgorithm::kRing:
      return "ring";
    case AllReduceAlgorithm::kTree:
      return "tree";
    case AllReduceAlgorithm::kParameterServer:
      return "ps";
    case AllReduceAlgorithm::kAuto:
      return "auto";
    case AllReduceAlgorithm::kHierarchical:
      return "hierarchical";
  }
  return "unknown";
}

std::string OpGroupName(OpGroup group) {
  switch (group) {
    case OpGroup::kTp:
      return "tp";
    case OpGroup::kDp:
      return "dp";
    case OpGroup::kWorld:
      return "world";
  }
  return "unknown";
}

absl::StatusOr<OpGroup> ParseOpGroup(absl::string_view name) {
  for (OpGroup group : {OpGroup::kTp, OpGroup::kDp, OpGroup::kWorld}) {
    if (name == OpGroupName(group)) return group;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown group \"", absl::CHexEscape(name),
                                                 "\" (expected tp, dp, world)"));
}

std::string ActivationName(Activation activation) {
  switch (activation) {
    case Activation::kNone:
      return "none";
    case Activation::kGelu:
      return "gelu";
    case Activation::kSwiglu:
      return "swiglu";
  }
  return "unknown";
}

std::string SchedulerName(Scheduler scheduler) {
  return scheduler == Scheduler::kDynamic ? "dynamic" : "static";
}

absl::StatusOr<Scheduler> ParseScheduler(absl::string_view name) {
  for (Scheduler s : {Scheduler::kStatic, Scheduler::kDynamic}) {
    if (name == SchedulerName(s)) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown scheduler \"", absl::CHexEscape(name),
                                                 "\" (expected static, dynamic)"));
}

absl::StatusOr<Activation> ParseActivation(absl::string_view name) {
  for (Activation a : {Activation::kNone, Activation::kGelu, Activation::kSwiglu}) {
    if (name == ActivationName(a)) return a;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown activation \"", absl::CHexEscape(name),
                                                 "\" (expected none, gelu, swiglu)"));
}

std::string SplitName(Split split) {
  switch (split) {
    case Split::kRows:
      return "split by rows";
    case Split::kCols:
      return "split by columns";
    case Split::kReplicated:
      return "whole on every rank";
    case Split::kPartial:
      return "a partial sum on every rank";
  }
  return "unknown";
}

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
  for (OpType type : {OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr, OpType::kAllGather,
                      OpType::kReduceScatter, OpType::kAllReduce, OpType::kGemm}) {
    if (name == OpTypeName(type)) return type;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown op type \"", absl::CHexEscape(name),
      "\" (expected ag_gemm, gemm_rs, gemm_ar, all_gather, reduce_scatter, all_reduce, gemm)"));
}

absl::StatusOr<OverlapMode> ParseOverlapMode(absl::string_view name) {
  for (OverlapMode mode : {OverlapMode::kSerial, OverlapMode::kBulk, OverlapMode::kChunked,
                           OverlapMode::kRing, OverlapMode::kAuto}) {
    if (name == OverlapModeName(mode)) return mode;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown mode \"", absl::CHexEscape(name),
                   "\" (expected serial, bulk, chunked, ring, auto)"));
}

absl::StatusOr<Transport> ParseTransport(absl::string_view name) {
  for (Transport transport : {Transport::kAuto, Transport::kNccl, Transport::kP2p,
                              Transport::kDirect, Transport::kNone}) {
    if (name == TransportName(transport)) return transport;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown transport \"", absl::CHexEscape(name),
                                                 "\" (expected auto, nccl, p2p, direct, none)"));
}

absl::StatusOr<AllReduceAlgorithm> ParseAllReduceAlgorithm(absl::string_view name) {
  for (AllReduceAlgorithm algorithm :
       {AllReduceAlgorithm::kDefault, AllReduceAlgorithm::kRing, AllReduceAlgorithm::kTree,
        AllReduceAlgorithm::kParameterServer, AllReduceAlgorithm::kAuto,
        AllReduceAlgorithm::kHierarchical}) {
    if (name == AllReduceAlgorithmName(algorithm)) return algorithm;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown algorithm \"", absl::CHexEscape(name),
                                                 "\" (expected default, ring, tree, ps, hierarchical, auto)"));
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
