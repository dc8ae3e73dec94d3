#include "common/graph_validator.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checked_size.h"
#include "common/status_macros.h"
#include "common/text.h"

namespace overlap {
namespace {

absl::Status Error(absl::string_view path, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", message));
}

std::string Quoted(absl::string_view text) { return QuotedExcerpt(text); }

}  // namespace

absl::Status CheckPrintable(absl::string_view path, absl::string_view text, size_t max_bytes) {
  if (text.empty()) return Error(path, "must not be empty");
  if (text.size() > max_bytes) {
    return Error(path, absl::StrCat(text.size(), " bytes is longer than the ", max_bytes,
                                    " allowed: ", Quoted(text)));
  }
  // yaml-cpp can decode UTF-8 text into a scalar that is not (a NUL before
  // "_" comes back as a lone 0xa0 byte): the API's strings must be UTF-8.
  if (FirstInvalidUtf8(text).has_value()) {
    return Error(path, absl::StrCat("must be UTF-8 text: ", Quoted(text)));
  }
  if (HasControlCharacters(text)) {
    return Error(path, absl::StrCat("must not hold control characters (newlines, terminal "
                                    "escapes, bidi overrides, invisible fillers, private-use "
                                    "characters): ",
                                    Quoted(text)));
  }
  return absl::OkStatus();
}

namespace {

absl::Status CheckIterations(const JobSpec& spec, const ValidationLimits& limits) {
  if (spec.iterations < 1) {
    return Error("iterations", absl::StrCat("must be at least 1 (got ", spec.iterations, ")"));
  }
  if (spec.iterations > limits.max_iterations) {
    return Error("iterations",
                 absl::StrCat(spec.iterations, " exceeds the limit of ", limits.max_iterations));
  }
  if (spec.warmup < 0) {
    return Error("warmup", absl::StrCat("must be non-negative (got ", spec.warmup, ")"));
  }
  if (spec.warmup > limits.max_iterations) {
    return Error("warmup",
                 absl::StrCat(spec.warmup, " exceeds the limit of ", limits.max_iterations));
  }
  // Every op runs warmup + iterations times, several rounds of them: the
  // product is a loop count, and must not wrap where a config raises the limits.
  ASSIGN_OR_RETURN(const int64_t per_op,
                   CheckedAdd(spec.iterations, spec.warmup, "iterations + warmup"));
  return CheckedMul(per_op, static_cast<int64_t>(spec.ops.size()), "iterations x ops").status();
}

// Products of the global dimensions must fit in int64, and every global tensor
// (per-rank tensors are no larger) must have a byte size that fits too, so that
// later size arithmetic in int64 or size_t can never wrap.
absl::Status CheckOverflow(const OpSpec& op, const std::string& path, DType dtype) {
  auto product = [&](int64_t a, int64_t b, const char* what) -> absl::StatusOr<int64_t> {
    absl::StatusOr<int64_t> p = CheckedMul(a, b, path);
    if (p.ok()) return p;
    return Error(path, absl::StrCat(what, " overflows 64 bits (", a, " x ", b, ")"));
  };
  ASSIGN_OR_RETURN(const int64_t mk, product(op.m, op.k, "m*k"));
  ASSIGN_OR_RETURN(const int64_t kn, product(op.k, op.n, "k*n"));
  ASSIGN_OR_RETURN(const int64_t mn, product(op.m, op.n, "m*n"));
  RETURN_IF_ERROR(product(mn, op.k, "m*n*k").status());
  const int64_t elem = static_cast<int64_t>(DTypeSize(dtype));
  const struct {
    const char* name;
    int64_t elements;
  } tensors[] = {{"A (m*k)", mk}, {"W (k*n)", kn}, {"Y (m*n)", mn}};
  for (const auto& t : tensors) {
    if (!CheckedBytes(t.elements, elem, path).ok()) {
      return Error(path, absl::StrCat(t.name, " has ", t.elements, " elements; its size in bytes (",
                                      DTypeName(dtype), ") overflows 64 bits"));
    }
  }
  return absl::OkStatus();
}

// An all-reduce's algorithm: ps exists only over the copy engines, and ring and
// tree over the library only where the backend can choose (NCCL).
absl::Status CheckAlgorithm(const OpSpec& op, const std::string& path, bool library_algorithms) {
  const std::string field = absl::StrCat(path, ".algorithm");
  const std::string name = AllReduceAlgorithmName(op.algorithm);
  // auto tries only what the backend has.
  // hierarchical is made of the transport's own collectives (CheckGroup).
  if (op.algorithm == AllReduceAlgorithm::kDefault || op.algorithm == AllReduceAlgorithm::kAuto ||
      op.algorithm == AllReduceAlgorithm::kHierarchical) {
    return absl::OkStatus();
  }
  if (op.transport == Transport::kDirect) return absl::OkStatus();  // refused below
  if (op.algorithm == AllReduceAlgorithm::kParameterServer) {
    if (op.transport == Transport::kNccl) {
      return Error(field,
                   "ps is a copy-engine layout (rank 0 pulls and sums, then every rank "
                   "pulls the sum): transport p2p or auto");
    }
    return absl::OkStatus();
  }
  if (!library_algorithms && op.transport != Transport::kP2p) {
    return Error(field, absl::StrCat("this backend's library collectives have no ", name,
                                     " choice (NCCL's are on the cuda backend): give transport: "
                                     "p2p for the copy-engine ",
                                     name));
  }
  return absl::OkStatus();
}

// A collective alone: its rows split over the ranks, serial (nothing to
// overlap with) over NCCL or copy engines.
absl::Status CheckCollectiveOnly(const OpSpec& op, const std::string& path, int tp,
                                 const std::string& over, bool library_algorithms) {
  const std::string type = OpTypeName(op.type);
  if (op.k != 0) {
    return Error(absl::StrCat(path, ".k"),
                 absl::StrCat(type, " is a collective alone, with no GEMM: leave k out"));
  }
  if (op.m % tp != 0) {
    return Error(absl::StrCat(path, ".m"), absl::StrCat(op.m, " is not divisible by ", over, " = ",
                                                        tp, " (required by ", type, ")"));
  }
  if (op.mode != OverlapMode::kSerial && op.mode != OverlapMode::kAuto) {
    return Error(absl::StrCat(path, ".mode"),
                 absl::StrCat(type, " has no GEMM to overlap with: mode serial or auto (got ",
                              OverlapModeName(op.mode), ")"));
  }
  if (op.chunks != 0) return Error(absl::StrCat(path, ".chunks"), "only valid for GEMM ops");
  RETURN_IF_ERROR(CheckAlgorithm(op, path, library_algorithms));
  if (op.transport == Transport::kDirect) {
    return Error(absl::StrCat(path, ".transport"),
                 "direct is only for gemm_rs and gemm_ar (a GEMM's own stores); use nccl, p2p "
                 "or auto");
  }
  return absl::OkStatus();
}

// A GEMM alone: its columns split over the ranks; nothing to overlap, nothing
// to move.
absl::Status CheckGemmOnly(const OpSpec& op, const std::string& path, int tp,
                           const std::string& over) {
  const char* split = op.row_parallel ? "k" : "n";
  const int64_t value = op.row_parallel ? op.k : op.n;
  if (value % tp != 0) {
    return Error(absl::StrCat(path, ".", split),
                 absl::StrCat(value, " is not divisible by ", over, " = ", tp, " (required by ",
                              op.row_parallel ? "a row-parallel gemm" : "gemm", ")"));
  }
  if (op.mode != OverlapMode::kSerial && op.mode != OverlapMode::kAuto) {
    return Error(absl::StrCat(path, ".mode"),
                 absl::StrCat("gemm has no collective to overlap with: mode serial or auto (got ",
                              OverlapModeName(op.mode), ")"));
  }
  if (op.chunks != 0) {
    return Error(absl::StrCat(path, ".chunks"), "only valid for ops with a collective");
  }
  if (op.transport != Transport::kAuto && op.transport != Transport::kNone) {
    return Error(absl::StrCat(path, ".transport"),
                 absl::StrCat("gemm moves no data between GPUs: transport none or auto (got ",
                              TransportName(op.transport), ")"));
  }
  return absl::OkStatus();
}

// fp8 GEMMs (cuBLASLt on Hopper) need every matrix's rows to start 16 bytes
// apart: each rank's k and n multiples of 16 (n for the bf16 output as well).
absl::Status CheckFp8Widths(const OpSpec& op, const std::string& path, int tp,
                            const std::string& over, DType dtype) {
  if (dtype != DType::kFP8 || IsCollectiveOnly(op.type)) return absl::OkStatus();
  const LocalShapes local = LocalShapesFor(op, tp);
  const bool row_gemm = op.type == OpType::kGemm && op.row_parallel;
  const bool n_split = op.type == OpType::kAgGemm || (op.type == OpType::kGemm && !row_gemm);
  const bool k_split = op.type == OpType::kGemmRs || op.type == OpType::kGemmAr || row_gemm;
  for (const auto& [name, value, split] :
       {std::tuple<const char*, int64_t, bool>{"k", local.gemm_k, k_split},
        {"n", local.gemm_n, n_split}}) {
    if (value % 16 == 0) continue;
    return Error(absl::StrCat(path, ".", name),
                 absl::StrCat(split ? absl::StrCat(name, "/", over, " = ") : std::string(), value,
                              " is not a multiple of 16, which fp8 GEMMs need (cuBLASLt)"));
  }
  return absl::OkStatus();
}

absl::Status CheckOp(const OpSpec& op, size_t index, int tp, const std::string& over, DType dtype,
                     bool library_algorithms) {
  const std::string path = absl::StrCat("ops[", index, "]");
  if (op.algorithm != AllReduceAlgorithm::kDefault && op.type != OpType::kAllReduce) {
    return Error(absl::StrCat(path, ".algorithm"),
                 absl::StrCat("only for all_reduce (how it moves its bytes: ring, tree, ps or "
                              "auto); ",
                              OpTypeName(op.type), " takes none"));
  }
  const bool collective = IsCollectiveOnly(op.type);
  for (const auto& [name, value] :
       {std::pair<const char*, int64_t>{"m", op.m}, {"k", op.k}, {"n", op.n}}) {
    if (collective && std::string(name) == "k") continue;
    if (value <= 0) {
      return Error(absl::StrCat(path, ".", name),
                   absl::StrCat("must be positive (got ", value, ")"));
    }
  }
  RETURN_IF_ERROR(CheckOverflow(op, path, dtype));
  if (IsGemmOnly(op.type)) {
    RETURN_IF_ERROR(CheckGemmOnly(op, path, tp, over));
    return CheckFp8Widths(op, path, tp, over, dtype);
  }
  if (op.transport == Transport::kNone) {
    return Error(absl::StrCat(path, ".transport"),
                 absl::StrCat("none is only for gemm (no collective); ", OpTypeName(op.type),
                              " needs nccl, p2p or auto"));
  }
  if (collective) return CheckCollectiveOnly(op, path, tp, over, library_algorithms);
  const bool split_n = op.type == OpType::kAgGemm;
  const std::pair<const char*, int64_t> split[] = {{"m", op.m},
                                                   {split_n ? "n" : "k", split_n ? op.n : op.k}};
  for (const auto& [name, value] : split) {
    if (value % tp != 0) {
      return Error(absl::StrCat(path, ".", name),
                   absl::StrCat(value, " is not divisible by ", over, " = ", tp, " (required by ",
                                OpTypeName(op.type), ")"));
    }
  }
  RETURN_IF_ERROR(CheckFp8Widths(op, path, tp, over, dtype));
  const std::string chunks_path = absl::StrCat(path, ".chunks");
  // With mode auto, chunks narrows the chunked and ring candidates to that count.
  if (op.chunks != 0 && (op.mode == OverlapMode::kSerial || op.mode == OverlapMode::kBulk)) {
    return Error(chunks_path, "only valid with mode: chunked, ring or auto");
  }
  if (op.chunks < 0) {
    return Error(chunks_path, absl::StrCat("must be at least 1 (got ", op.chunks, ")"));
  }
  // Chunks need not divide the rows (the pieces then differ a little, see
  // ops::PieceOf), but each needs a row.
  if (op.chunks > op.m / tp) {
    return Error(chunks_path, absl::StrCat(op.chunks, " is more than m/", over, " = ", op.m / tp,
                                           " rows (every chunk needs at least one row)"));
  }
  if (op.transport == Transport::kDirect) {
    const std::string transport_path = absl::StrCat(path, ".transport");
    if (op.type == OpType::kAgGemm) {
      return Error(transport_path,
                   "direct is only for gemm_rs and gemm_ar (the GEMM stores its partial into the "
                   "peer's memory; ag_gemm has nothing to store remotely)");
    }
    if (op.mode != OverlapMode::kRing && op.mode != OverlapMode::kAuto) {
      return Error(transport_path, absl::StrCat("direct only works with mode: ring or auto (got ",
                                                OverlapModeName(op.mode), ")"));
    }
  }
  return absl::OkStatus();
}

// tp x dp covers the job's devices exactly. In 64 bits and bounded first: in
// 32, tp x dp = 6 x 715827883 wrapped to 2 and passed on a 2-device node.
absl::Status CheckMesh(const Mesh& mesh, int device_count) {
  if (!mesh.declared()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const int ranks, MeshRanks(mesh.tp, mesh.dp));
  if (ranks == device_count) return absl::OkStatus();
  return Error("mesh", absl::StrCat("tp x dp = ", mesh.tp, " x ", mesh.dp, " = ", ranks,
                                    " devices, but the job has ", device_count,
                                    " (devices, or every device of the backend)"));
}

// dp needs a mesh to be across; a hierarchical all-reduce needs tp and dp
// groups of more than one device to be made of.
absl::Status CheckGroup(const Mesh& mesh, const OpSpec& op, size_t index) {
  const std::string path = absl::StrCat("ops[", index, "]");
  if (op.group == OpGroup::kDp && !mesh.declared()) {
    return Error(absl::StrCat(path, ".group"),
                 "dp is across the replicas of a mesh: declare one (mesh: {tp: T, dp: D})");
  }
  if (op.algorithm == AllReduceAlgorithm::kHierarchical &&
      (op.group != OpGroup::kWorld || !mesh.declared() || mesh.tp < 2 || mesh.dp < 2)) {
    return Error(absl::StrCat(path, ".algorithm"),
                 "hierarchical reduces inside the tp groups and across the replicas: it needs "
                 "group: world and a mesh with tp > 1 and dp > 1");
  }
  return absl::OkStatus();
}

// How a tensor lies, for messages: "[8192, 28672] split by columns over tp = 2".
std::string DescribeLayout(const TensorLayout& layout, int size, const std::string& over) {
  std::string text = absl::StrCat("[", layout.rows, ", ", layout.cols, "]");
  if (size > 1) absl::StrAppend(&text, " ", SplitName(layout.split), " over ", over, " = ", size);
  return text;
}

// An op that reads another's output (OpSpec::input) reads a tensor of the
// shape and layout that one writes, after its activation: over the same
// group, the same global shape split the same way (any way on one rank). A
// reduction over another group (a dp all_reduce of a tp op's weight gradient)
// sums each device's shard with its group's: it reads the shard's shape.
absl::Status CheckWiring(const JobSpec& spec, int device_count) {
  std::map<std::string, int> index_of;
  for (size_t i = 0; i < spec.ops.size(); ++i) index_of[spec.ops[i].id] = static_cast<int>(i);
  auto over = [&](OpGroup group) {
    return spec.mesh.declared() ? OpGroupName(group) : std::string("tp");
  };
  for (size_t i = 0; i < spec.ops.size(); ++i) {
    const OpSpec& op = spec.ops[i];
    if (op.input.empty()) continue;
    const std::string path = absl::StrCat("ops[", i, "].input");
    const auto it = index_of.find(op.input);
    if (it == index_of.end()) return Error(path, absl::StrCat("unknown op ", Quoted(op.input)));
    if (it->second == static_cast<int>(i)) return Error(path, "an op cannot read its own output");
    const OpSpec& from = spec.ops[it->second];
    const int from_size = GroupSize(spec.mesh, from.group, device_count);
    const int to_size = GroupSize(spec.mesh, op.group, device_count);
    TensorLayout out = OutputLayout(from);
    LocalShapes from_local = LocalShapesFor(from, from_size);
    const std::string written = DescribeLayout(out, from_size, over(from.group));
    std::string after_activation;
    if (op.activation == Activation::kSwiglu) {
      if (from_local.y_cols % 2 != 0) {
        return Error(
            absl::StrCat("ops[", i, "].activation"),
            absl::StrCat("swiglu halves each rank's columns of ", Quoted(from.id),
                         "'s output (gate, then up), but a rank holds ", from_local.y_cols));
      }
      out.cols /= 2;
      from_local.y_cols /= 2;
      after_activation =
          absl::StrCat(" (after swiglu ", DescribeLayout(out, from_size, over(from.group)), ")");
    }
    const TensorLayout in = InputLayout(op);
    const LocalShapes to_local = LocalShapesFor(op, to_size);
    const bool same_groups = GroupsOf(spec.mesh, from.group, device_count) ==
                             GroupsOf(spec.mesh, op.group, device_count);
    bool agree = false;
    std::string read;
    if (same_groups) {
      agree = out.rows == in.rows && out.cols == in.cols && (out.split == in.split || to_size == 1);
      read = DescribeLayout(in, to_size, over(op.group));
    } else {
      agree = in.split == Split::kPartial && from_local.y_rows == to_local.a_rows &&
              from_local.y_cols == to_local.a_cols;
      read = in.split == Split::kPartial
                 ? absl::StrCat("[", to_local.a_rows, ", ", to_local.a_cols, "] on each device")
                 : absl::StrCat(DescribeLayout(in, to_size, over(op.group)),
                                " (only a reduction reads another group's shards)");
      if (in.split == Split::kPartial) {
        absl::StrAppend(&after_activation, ", [", from_local.y_rows, ", ", from_local.y_cols,
                        "] on each device");
      }
    }
    if (!agree) {
      return Error(path,
                   absl::StrCat(Quoted(op.id), " reads ", Quoted(from.id), "'s output, but ",
                                Quoted(from.id), " writes ", written, after_activation, " and ",
                                Quoted(op.id), " (", OpTypeName(op.type), ") reads ", read));
    }
  }
  return absl::OkStatus();
}

// Spec has a cycle among the ops not `done` (each still waits on one of them).
// Walks `after` edges until a node repeats, then reports the loop in execution
// order starting from its first op in file order.
absl::Status CycleError(const JobSpec& spec, const std::map<std::string, int>& index_of,
                        const std::vector<bool>& done) {
  int start = 0;
  while (done[start]) ++start;
  std::vector<int> walk;
  std::vector<int> position(spec.ops.size(), -1);
  int v = start;
  while (position[v] < 0) {
    position[v] = static_cast<int>(walk.size());
    walk.push_back(v);
    for (const std::string& dep : spec.ops[v].after) {
      const int d = index_of.at(dep);
      if (!done[d]) {
        v = d;
        break;
      }
    }
  }
  std::vector<int> cycle(walk.begin() + position[v], walk.end());
  std::reverse(cycle.begin(), cycle.end());
  std::rotate(cycle.begin(), std::min_element(cycle.begin(), cycle.end()), cycle.end());
  cycle.push_back(cycle.front());
  // A long cycle is named by its first ops, so that the message stays short.
  constexpr size_t kNamed = 8;
  std::vector<std::string> ids;
  for (size_t i = 0; i < cycle.size() && i < kNamed; ++i) {
    ids.push_back(Excerpt(spec.ops[cycle[i]].id, 40));
  }
  std::string more;
  if (cycle.size() > kNamed)
    more = absl::StrCat(" -> ... (", cycle.size() - 1, " ops in the cycle)");
  return Error("ops", absl::StrCat("dependency cycle ", absl::StrJoin(ids, " -> "), more));
}

}  // namespace

absl::StatusOr<std::vector<int>> TopologicalOrder(const JobSpec& spec, const ReadyKey& key,
                                                  const OnPicked& picked) {
  const int count = static_cast<int>(spec.ops.size());
  std::map<std::string, int> index_of;
  for (int i = 0; i < count; ++i) {
    if (!index_of.emplace(spec.ops[i].id, i).second) {
      return Error(absl::StrCat("ops[", i, "].id"),
                   absl::StrCat("duplicate id ", Quoted(spec.ops[i].id)));
    }
  }
  std::vector<std::vector<int>> dependents(count);
  std::vector<int> waiting_on(count, 0);
  for (int i = 0; i < count; ++i) {
    std::set<int> deps;
    for (const std::string& dep : spec.ops[i].after) {
      auto it = index_of.find(dep);
      if (it == index_of.end()) {
        return Error(absl::StrCat("ops[", i, "].after"), absl::StrCat("unknown op ", Quoted(dep)));
      }
      if (deps.insert(it->second).second) {
        dependents[it->second].push_back(i);
        ++waiting_on[i];
      }
    }
  }
  // Kahn's algorithm; among the ready ops the smallest (key, file index) goes
  // next, so that ties keep file order. Graphs have a handful of ops: a scan
  // of the ready ones is cheaper than keeping them sorted.
  std::vector<int> ready;
  for (int i = 0; i < count; ++i) {
    if (waiting_on[i] == 0) ready.push_back(i);
  }
  std::vector<int> order;
  std::vector<bool> done(count, false);
  auto key_of = [&](int i) { return std::make_pair(key ? key(i, done) : 0, i); };
  while (!ready.empty()) {
    const auto next = std::min_element(ready.begin(), ready.end(),
                                       [&](int a, int b) { return key_of(a) < key_of(b); });
    const int v = *next;
    ready.erase(next);
    order.push_back(v);
    done[v] = true;
    if (picked) picked(v);
    for (int d : dependents[v]) {
      if (--waiting_on[d] == 0) ready.push_back(d);
    }
  }
  if (static_cast<int>(order.size()) != count) return CycleError(spec, index_of, done);
  return order;
}

namespace {

// scheduler: dynamic needs a bound to keep and something to defer: a
// collective alone that no op waits on or reads (a gradient all-reduce),
// beside at least one op with a GEMM, in a layer step.
absl::Status CheckScheduler(const JobSpec& spec) {
  if (spec.scheduler != Scheduler::kDynamic) return absl::OkStatus();
  if (!(spec.defer_bound_ms > 0)) {
    return Error("defer_bound_ms",
                 absl::StrCat("must be above 0 with scheduler: dynamic, where it is each deferred "
                              "collective's deadline after its input is ready (got ",
                              spec.defer_bound_ms, ")"));
  }
  if (!spec.layer_step) {
    return Error("scheduler",
                 "dynamic schedules the layer step, which layer_step: false turns off");
  }
  std::set<std::string> waited_on;
  bool any_gemm = false;
  for (const OpSpec& op : spec.ops) {
    waited_on.insert(op.after.begin(), op.after.end());
    if (!op.input.empty()) waited_on.insert(op.input);
    any_gemm = any_gemm || !IsCollectiveOnly(op.type);
  }
  bool any_deferrable = false;
  for (const OpSpec& op : spec.ops) {
    any_deferrable = any_deferrable || (IsCollectiveOnly(op.type) && waited_on.count(op.id) == 0);
  }
  if (!any_gemm || !any_deferrable) {
    return Error("scheduler",
                 "dynamic: the graph has nothing to defer: it needs a collective alone that no op "
                 "waits on (a gradient all_reduce, e.g. overlapctl graph --pass backward --grads) "
                 "beside an op with a GEMM");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<int>> ValidateJobSpec(const JobSpec& spec,
                                                 const ValidationLimits& limits) {
  RETURN_IF_ERROR(CheckPrintable("name", spec.name, kMaxNameBytes));
  if (spec.ops.empty()) return Error("ops", "at least one op is required");
  if (static_cast<int64_t>(spec.ops.size()) > limits.max_ops) {
    return Error("ops", absl::StrCat(spec.ops.size(),
                                     " ops is more than this daemon takes in one "
                                     "job (max_ops_per_job = ",
                                     limits.max_ops, "): split the graph into several jobs"));
  }
  ASSIGN_OR_RETURN(std::vector<int> group, ResolveDevices(spec, limits));
  RETURN_IF_ERROR(CheckIterations(spec, limits));
  const int device_count = static_cast<int>(group.size());
  RETURN_IF_ERROR(CheckMesh(spec.mesh, device_count));
  std::set<std::string> ids;
  for (size_t i = 0; i < spec.ops.size(); ++i) {
    const OpSpec& op = spec.ops[i];
    const std::string id_path = absl::StrCat("ops[", i, "].id");
    RETURN_IF_ERROR(CheckPrintable(id_path, op.id, kMaxOpIdBytes));
    if (!ids.insert(op.id).second) {
      return Error(id_path, absl::StrCat("duplicate id ", Quoted(op.id)));
    }
    RETURN_IF_ERROR(CheckGroup(spec.mesh, op, i));
    RETURN_IF_ERROR(CheckOp(op, i, GroupSize(spec.mesh, op.group, device_count),
                            spec.mesh.declared() ? OpGroupName(op.group) : "tp", spec.dtype,
                            limits.library_algorithms));
  }
  RETURN_IF_ERROR(CheckWiring(spec, device_count));
  RETURN_IF_ERROR(TopologicalOrder(spec).status());
  RETURN_IF_ERROR(CheckScheduler(spec));
  // A minute per op already keeps a layer's job for many minutes.
  if (spec.gemm_alone_sustain_ms > kMaxGemmAloneSustainMs) {
    return Error("gemm_alone_sustain_ms", absl::StrCat("must be at most ", kMaxGemmAloneSustainMs,
                                                       " (got ", spec.gemm_alone_sustain_ms, ")"));
  }
  return group;
}

absl::StatusOr<std::vector<int>> ResolveDevices(const JobSpec& spec,
                                                const ValidationLimits& limits) {
  std::vector<int> group;
  if (spec.devices.empty()) {
    if (limits.device_count <= 0) return Error("devices", "this node has no devices");
    for (int d = 0; d < limits.device_count; ++d) group.push_back(d);
    return group;
  }
  std::set<int> seen;
  for (size_t i = 0; i < spec.devices.size(); ++i) {
    const int device = spec.devices[i];
    const std::string path = absl::StrCat("devices[", i, "]");
    if (device < 0 || device >= limits.device_count) {
      return Error(path, absl::StrCat("device ", device, " does not exist (this node has ",
                                      limits.device_count, ")"));
    }
    if (!seen.insert(device).second) {
      return Error(path, absl::StrCat("device ", device, " is listed twice"));
    }
    group.push_back(device);
  }
  return group;
}

}  // namespace overlap
