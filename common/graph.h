// The layer-graph model: what a job asks the daemon to run. Parsed from YAML or
// JSON by graph_parser, checked by graph_validator. Portable, no GPU types.
//
// Shapes are global (before the tensor-parallel split); tp = number of devices.
//   ag_gemm: rank holds A[m/tp, k], W[k, n/tp]; Y[m, n/tp] = AllGather_m(A) x W
//   gemm_rs: rank holds A[m, k/tp], W[k/tp, n]; Y[m/tp, n] = ReduceScatter_m(A x W)
//   gemm_ar: rank holds A[m, k/tp], W[k/tp, n]; Y[m, n]    = AllReduce(A x W)
// and the collectives alone (no GEMM, no k), e.g. a data-parallel gradient
// all-reduce in a layer graph, or a bandwidth sweep (overlapctl commbench):
//   all_gather:     rank holds X[m/tp, n]; Y[m, n]    = AllGather_m(X)
//   reduce_scatter: rank holds X[m, n];    Y[m/tp, n] = ReduceScatter_m(X)
//   all_reduce:     rank holds X[m, n];    Y[m, n]    = AllReduce(X)
// and a GEMM alone (no collective), e.g. a weight-gradient GEMM in a backward
// graph, split over the ranks by its columns as ag_gemm's:
//   gemm:           rank holds A[m, k], W[k, n/tp]; Y[m, n/tp] = A x W
// or, row-parallel (OpSpec::row_parallel), a partial sum for a reduction:
//   gemm, row:      rank holds A[m, k/tp], W[k/tp, n]; Y[m, n] = A x W (partial)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/dtype.h"

namespace overlap {

enum class OpType { kAgGemm, kGemmRs, kGemmAr, kAllGather, kReduceScatter, kAllReduce, kGemm };
// all_gather, reduce_scatter, all_reduce: a collective with no GEMM (k unused).
bool IsCollectiveOnly(OpType type);
// gemm: a GEMM with no collective (its transport is none).
bool IsGemmOnly(OpType type);
enum class OverlapMode { kSerial, kBulk, kChunked, kRing, kAuto };
// How a schedule's bytes move between GPUs: NCCL's kernels, copy-engine peer
// copies, or the GEMM's own stores straight into the peer's memory (direct:
// gemm_rs and gemm_ar rings only, over peer access); none for a GEMM alone.
enum class Transport { kAuto, kNccl, kP2p, kDirect, kNone };
// How an all_reduce moves its bytes (all_reduce ops only). kDefault is the
// transport's own: NCCL picks per size; p2p reduces 1/N on each rank and
// gathers the rest (direct). Per GPU, for S bytes over N ranks:
//   ring:  N-1 reduce steps then N-1 gather steps to the next rank, 2(N-1)/N x S
//          in and out whatever N is (NCCL_ALGO=Ring over nccl);
//   tree:  reduce up a binary tree to rank 0 and broadcast back down, in
//          pipelined pieces: log2(N) hops of latency, up to 3S through an inner
//          rank (NCCL_ALGO=Tree over nccl);
//   ps:    a parameter server: rank 0 pulls and sums everything, then every rank
//          pulls the sum: (N-1) x S in and out of rank 0 (p2p only);
//   auto:  autotune measures every one the transports have (the op's only:
//          a schedule's algorithm is never auto).
//   hierarchical: a world all_reduce over a mesh (tp > 1 and dp > 1): reduce-
//          scatter inside each tp group, all-reduce the 1/tp share across the
//          replicas, all-gather inside each tp group: the replicas exchange
//          S/tp each instead of S, the links between nodes' share;
enum class AllReduceAlgorithm { kDefault, kRing, kTree, kParameterServer, kAuto, kHierarchical };

std::string OpTypeName(OpType type);             // "ag_gemm" ... "all_reduce"
std::string OverlapModeName(OverlapMode mode);   // "serial" ...
std::string TransportName(Transport transport);  // "auto" | "nccl" | "p2p" | "direct" | "none"
// "default" | "ring" | "tree" | "ps" | "auto" | "hierarchical"
std::string AllReduceAlgorithmName(AllReduceAlgorithm algorithm);
absl::StatusOr<OpType> ParseOpType(absl::string_view name);
absl::StatusOr<OverlapMode> ParseOverlapMode(absl::string_view name);
absl::StatusOr<Transport> ParseTransport(absl::string_view name);
absl::StatusOr<AllReduceAlgorithm> ParseAllReduceAlgorithm(absl::string_view name);
// An algorithm as an op's result and the tuning cache keep it: "" for the
// default, which most all-reduces (and every other op) run.
std::string StoredAllReduceAlgorithm(AllReduceAlgorithm algorithm);
absl::StatusOr<AllReduceAlgorithm> ParseStoredAllReduceAlgorithm(absl::string_view stored);

// The devices an op runs over when the graph declares a mesh (JobSpec::mesh):
// tp x dp devices, tp-major, so that devices [d*tp, (d+1)*tp) are replica d's
// tensor-parallel group.
//   tp:    each replica's tp group, every replica running its own copy of the op
//          (the default, and without a mesh every device);
//   dp:    each tp rank's data-parallel group, its devices across the replicas
//          (a gradient all-reduce);
//   world: every device as one group.
enum class OpGroup { kTp, kDp, kWorld };
std::string OpGroupName(OpGroup group);  // "tp" | "dp" | "world"
absl::StatusOr<OpGroup> ParseOpGroup(absl::string_view name);

// What an op applies to another op's output before reading it as its input
// (OpSpec::input), in one elementwise kernel that also casts to the input's
// dtype (fp8: quantizes it with the chain's scale, kChainFp8Dequant):
//   none:   the output as it is;
//   gelu:   GELU, tanh approximation, as Megatron-LM's and TransformerEngine's;
//   swiglu: a gated MLP's SiLU(gate) x up, where each rank's shard of the
//           producer's output holds its gate columns, then its up columns
//           (Megatron-LM's layout of fc1's weight): the width halves.
// How a layer step sends its deferred collectives (the gradient all-reduces
// nothing in the step waits on): static, as planned before the step from the
// ops' times alone; dynamic, chunk by chunk at run time on the deferred lane,
// between critical collectives and within defer_bound_ms
// (server/runner/deferred_dispatcher.h).
enum class Scheduler { kStatic, kDynamic };
std::string SchedulerName(Scheduler scheduler);  // "static" | "dynamic"
absl::StatusOr<Scheduler> ParseScheduler(absl::string_view name);

// Which of a device's lanes a job's collectives belong on when it shares the
// device with sessions (docs/SESSIONS.md, "The lanes belong to the GPU"):
// critical work goes first; deferred work yields to any critical collective
// queued or running on its devices, within its bound. Graph key
// `priority_class`; `priority` is the job's rank in the queue.
enum class PriorityClass { kCritical, kDeferred };
std::string PriorityClassName(PriorityClass priority_class);  // "critical" | "deferred"
absl::StatusOr<PriorityClass> ParsePriorityClass(absl::string_view name);

enum class Activation { kNone, kGelu, kSwiglu };
std::string ActivationName(Activation activation);  // "none" | "gelu" | "swiglu"
absl::StatusOr<Activation> ParseActivation(absl::string_view name);
// An fp8 op's input made from another op's output holds value / this in E4M3
// (values up to 7 before saturating): a fixed per-tensor scale where
// TransformerEngine keeps an amax history; the outputs of the graphs'
// normalised GEMMs stay within a few units.
inline constexpr float kChainFp8Dequant = 1.0f / 64.0f;

struct OpSpec {
  std::string id;
  OpType type = OpType::kAgGemm;
  int64_t m = 0;
  int64_t k = 0;
  int64_t n = 0;
  OverlapMode mode = OverlapMode::kAuto;
  int chunks = 0;  // chunked only; 0 = not given (the schedule picks)
  Transport transport = Transport::kAuto;
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kDefault;  // all_reduce only
  OpGroup group = OpGroup::kTp;
  std::vector<std::string> after;  // ids of ops this one depends on
  // The op whose output is this op's A (X for a collective alone), through
  // `activation`; it is in `after` too. "": seeded random inputs.
  std::string input;
  Activation activation = Activation::kNone;
  // gemm only: row-parallel, A[m, k/tp] x W[k/tp, n] -> a partial [m, n] on
  // every rank (key `parallel: row`), as a reduction's input; else column-
  // parallel, split as ag_gemm's.
  bool row_parallel = false;
  // Whose seeded data A and W hold: the ids of the ops they came from when the
  // overlap pass fused two ops into this one (common/overlap_pass.h), so that
  // the fused graph computes on the same data; "" = this op's id.
  std::string a_seed_id, w_seed_id;
};

// What the overlap pass (common/overlap_pass.h) did with a collective and the
// GEMM beside it: fused them into one op, or left them alone, and why.
struct FusionNote {
  std::string gemm;        // the GEMM's id, which the fused op keeps
  std::string collective;  // the collective's id
  std::string fused_type;  // ag_gemm | gemm_rs | gemm_ar
  bool fused = false;
  std::string why_not;  // when not fused
};

// A tensor-parallel x data-parallel layout of a job's devices (OpGroup).
struct Mesh {
  int tp = 0;  // 0: no mesh, every op runs over all the job's devices as one group
  int dp = 0;
  bool declared() const { return tp > 0; }
};

// The chunk of a deferred all-reduce under scheduler: dynamic when chunk_kib is
// 0: small enough to yield between chunks to critical work.
inline constexpr int kDynamicChunkKib = 256;

// The graph schema this overlapd reads (graph key `version`; absent = this).
inline constexpr int kGraphVersion = 1;

// The most gemm_alone_sustain_ms a job may ask for.
inline constexpr double kMaxGemmAloneSustainMs = 60000;

struct JobSpec {
  std::string name;
  std::vector<int> devices;  // empty = every device of the backend
  // Daemons (peer addresses) the job spans, in rank order: each brings the
  // same `devices`, ranks are node-major. Empty: this daemon alone.
  std::vector<std::string> nodes;
  Mesh mesh;
  DType dtype = DType::kBF16;
  int iterations = 20;
  int warmup = 5;
  bool verify = true;
  // How long `auto` may measure candidates per op (seconds; 0 = no bound).
  // Past it no further candidate run starts, and the choice is made from what
  // was measured (the report says so).
  double autotune_budget_s = 0;
  // What the GPUs do while the host enqueues each timed iteration behind its
  // launch gate: run the op's GEMM (heat, the default), as a training loop's GPUs
  // would be busy with the previous layer, or wait (idle). An idle GPU banks
  // power headroom: a 2 ms rest made a 5.6 ms GEMM 10% faster on an H200, which
  // favoured schedules with a slow enqueue (docs/PERFORMANCE.md).
  bool heat_head_start = true;
  // Each op's GEMM alone timed back to back for about this long (ms) instead
  // of in short rounds between the op's timed iterations; 0 = the rounds.
  // Rounds of a few iterations let the power controller run a GEMM above the
  // clock it keeps under sustained load (an H100 at its 700 W cap), so a step
  // that runs at the cap cannot reach the sum of its GEMMs as the rounds time
  // them; sustained, they run as they do in a training loop. Costs this long
  // per op with a GEMM.
  double gemm_alone_sustain_ms = 0;
  // After every op ran alone, time the whole graph as one step (ops/layer_step.h).
  // Sweeps of unrelated ops (bench, commbench) turn it off.
  bool layer_step = true;
  // In the layer step, deferred all-reduces (over one transport) that nothing
  // waits on are merged into buckets of up to this many MiB, each fired once
  // its last gradient is ready, as PyTorch DDP does (its default cap is 25 MiB);
  // 0 = no buckets.
  int bucket_mib = 25;
  // Gradient all-reduces larger than this many KiB are cut into pieces of it,
  // each sent after one of the ops that follow, so that they interleave with
  // that compute instead of one long transfer beside it; 0 = whole.
  int chunk_kib = 0;
  // A deferred all-reduce that nothing waits on is joined back into the main
  // streams before the first op that starts at least this long (by the ops'
  // times alone) after it was sent, or at the end of the step.
  double defer_bound_ms = 50;
  // static | dynamic (Scheduler). Under dynamic, defer_bound_ms is each
  // deferred collective's deadline after its input was ready, and gradient
  // all-reduces are sent in chunks of chunk_kib (kDynamicChunkKib when 0).
  Scheduler scheduler = Scheduler::kStatic;
  // Autotune again even where the tuning cache holds a choice for an op:
  // choices tuned before this job started are ignored and replaced (bench sets
  // it: a benchmark measures what wins now).
  bool retune = false;
  // After an op's timed iterations, trace one more span by span (ops/timeline.h):
  // the report's breakdown of its step and `overlapctl timeline`.
  bool timeline = true;
  int priority = 0;
  PriorityClass priority_class = PriorityClass::kCritical;
  uint64_t seed = 1234;
  // Fuse plain collectives into the GEMMs beside them (common/overlap_pass.h)
  // before scheduling; key `fuse`, `overlapctl submit --no-fuse`.
  bool fuse = true;
  std::vector<OpSpec> ops;  // as written; topological order from TopologicalOrder()
  // What the overlap pass did to `ops`, for the report; empty before it ran.
  std::vector<FusionNote> fusions;
};

// The groups `group` forms over a job's `device_count` devices, each a list of
// positions in the job's device list: with a mesh as OpGroup says, and
// without one a single group of every device (dp as well). The mesh must
// match the device count (ValidateJobSpec checks it); one that does not is
// read as no mesh, so that no caller loops over an unchecked tp or dp.
std::vector<std::vector<int>> GroupsOf(const Mesh& mesh, OpGroup group, int device_count);
// Whether any of those groups has ranks on two nodes, the job's devices being
// `devices_per_node` to a node, node-major (a job spanning daemons).
bool GroupsCrossNodes(const Mesh& mesh, OpGroup group, int device_count, int devices_per_node);
// The size of each of those groups: the degree an op's dims are split over.
int GroupSize(const Mesh& mesh, OpGroup group, int device_count);

// The op shapes one rank sees for a tensor-parallel degree `tp`.
struct LocalShapes {
  int64_t a_rows, a_cols;          // this rank's A
  int64_t w_rows, w_cols;          // this rank's W
  int64_t y_rows, y_cols;          // this rank's Y
  int64_t gemm_m, gemm_n, gemm_k;  // the unchunked per-rank GEMM (0 for a collective alone)
};
LocalShapes LocalShapesFor(const OpSpec& op, int tp);

// How a tensor an op reads (its A, X for a collective alone) or writes (Y)
// lies over the ranks of the op's group: split by rows, by columns, whole on
// every rank, or a partial sum on every rank (what a reduction reads).
enum class Split { kRows, kCols, kReplicated, kPartial };
std::string SplitName(Split split);  // "split by rows" ...
struct TensorLayout {
  int64_t rows = 0, cols = 0;  // global
  Split split = Split::kReplicated;
};
TensorLayout InputLayout(const OpSpec& op);
TensorLayout OutputLayout(const OpSpec& op);

// Why `auto` ran the schedule it ran when the op had only one (a GEMM alone,
// or any op on one GPU); the report folds such ops into one line.
inline constexpr char kOnlyOneSchedule[] = "only one schedule applies";

// FLOPs of the whole op over all ranks: 2*m*n*k (0 for a collective alone).
double OpFlops(const OpSpec& op);

}  // namespace overlap
