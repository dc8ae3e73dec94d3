// OpContext: the buffers, streams and events one layer op uses on every rank of
// its tensor-parallel group, plus the helpers the schedules are written with.
//
// Buffers are allocated once per op (sized for every schedule the op may run,
// see ScratchNeeds) and freed when the context is destroyed. Events are named
// by kind and index (EventKind), created on first use and reused by every
// iteration after; a wait always refers to the latest record enqueued before it
// (engine.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "common/graph.h"
#include "common/schedule.h"
#include "server/engine/engine.h"

namespace overlap::ops {

// Per-rank buffer sizes in elements (of each buffer's dtype, OpContext::DTypeOf).
// Zero means "not needed".
struct BufferSizes {
  int64_t a = 0, w = 0, y = 0;  // inputs and output
  int64_t full = 0;             // gathered A (ag_gemm) or full partial P (gemm_rs)
  int64_t pingpong = 0;         // each of the two ping-pong buffers
  int64_t slots = 0;            // each of the tp-1 receive slots (p2p reductions)
  int64_t slot_count = 0;
  int64_t spare = 0;  // the collective's side of the GEMM-beside-comm measurement
  int64_t TotalElements() const {
    return a + w + y + full + 2 * pingpong + slots * slot_count + spare;
  }
};

// The dtype of each buffer of an op whose graph has `dtype`: they differ for
// fp8 only. GEMM inputs, and A gathered for them, hold the graph's dtype; GEMM
// outputs, partials and what reductions sum hold GemmOutputDType (bf16), and
// so do a reduce_scatter's and an all_reduce's inputs (GEMM outputs, gradients).
struct BufferDTypes {
  DType a, w, y;
  DType full;  // also the ping-pong buffers and the spare: gathered A, or partials
  DType slots;
  // An fp8 GEMM's per-tensor scales, A's and W's (engine.h, GemmArgs::a_scale).
  bool scales = false;
};
BufferDTypes BufferDTypesFor(OpType type, DType dtype);
// Bytes of one rank's buffers, in double so that absurd shapes saturate.
double BufferBytes(const BufferSizes& sizes, const BufferDTypes& dtypes);

// What `schedule` needs for `op` at tensor-parallel degree `tp`.
BufferSizes BuffersFor(const OpSpec& op, int tp, const Schedule& schedule);
// Element-wise maximum: one allocation serves every schedule autotune may try.
BufferSizes MaxSizes(const BufferSizes& a, const BufferSizes& b);

// What an event marks in a schedule; with an index (a piece, a chunk, a
// peer), one event of a rank.
enum class EventKind : uint8_t {
  kIterStart,       // an iteration's start on the compute stream (timing)
  kIterEnd,         // its end
  kGemmEnd,         // the GEMM beside the collective done (timing)
  kFork,            // compute -> comm at an iteration's start
  kJoin,            // comm -> compute at its end
  kGemm,            // a GEMM piece written
  kGathered,        // a gathered block of A arrived
  kArrived,         // a peer's piece arrived
  kReceived,        // a reduce-scatter's block received
  kReduced,         // a piece reduced
  kStored,          // a direct store landed in its owner's memory
  kPartial,         // a partial GEMM result written
  kRs,              // a reduce-scatter piece done
  kOwnBlock,        // the rank's own block written
  kOwnBlockCopied,  // and copied where the collective reads it
  kArReduced,       // an all-reduce part reduced
  kCaptureFork,     // graph capture: the other ranks join rank 0's stream
  kCaptureJoin,     // and rejoin it before the capture ends
  kGraphDone,       // a replayed graph finished
  kLayerFork,       // the layer step: a side stream forks off the main one
  kLayerDone,       // and a side op finishes
  kArRing,          // p2p all-reduce, ring: a step done (index: which all-reduce)
  kArTreeUp,        // tree: a piece's partial sum sent up
  kArTreeDown,      // tree: a piece's total sent down
  kArPs,            // parameter server: a piece summed on rank 0
  kArHierarchical,  // hierarchical: a rank's phase done (step: which phase)
  kInputReady,      // the layer step: an input made from another op's output
  kCriticalStart,   // scheduler: dynamic: an op with a collective starts on the main streams
  kCriticalDone,    // and is done
  kChunkStart,      // a deferred chunk starts on the deferred lane (index: the chunk)
  kChunkEnd,        // and is done
};

struct RankState {
  int device = 0;
  engine::StreamId compute = 0;
  engine::StreamId comm = 0;
  engine::BufferId a = engine::kNoBuffer, w = engine::kNoBuffer, y = engine::kNoBuffer;
  engine::BufferId full = engine::kNoBuffer;
  engine::BufferId pingpong[2] = {engine::kNoBuffer, engine::kNoBuffer};
  std::vector<engine::BufferId> slots;
  engine::BufferId spare = engine::kNoBuffer;
  // Where BufferDTypes::scales: A's and W's, OpContext::ScaleOf.
  engine::BufferId scales = engine::kNoBuffer;
  // Where the op's GEMM alone (the whole op at one rank, or a gemm op) also
  // writes epilogue(Y) in its epilogue: the next op's input (the layer step's
  // epilogue edge, OpContext::SetEpilogue). Not owned.
  engine::BufferId epilogue_out = engine::kNoBuffer;
};

// How an op's ranks form groups (common/graph.h, OpGroup): `group_size`
// consecutive ranks each, every group running the op on its own; 0 = all the
// ranks are one group. `mesh` is the job's, of which a world all_reduce's
// hierarchical schedule is made.
struct RankLayout {
  int group_size = 0;
  Mesh mesh;
};

class OpContext {
 public:
  // fp32 elements between the scales in RankState::scales (kGemmScaleAlignment).
  static constexpr int64_t kScaleStride = engine::kGemmScaleAlignment / sizeof(float);

  // Allocates the buffers; RESOURCE_EXHAUSTED when they do not fit.
  static absl::StatusOr<std::unique_ptr<OpContext>> Create(engine::Engine& engine, const OpSpec& op,
                                                           DType dtype,
                                                           const std::vector<int>& devices,
                                                           const BufferSizes& sizes,
                                                           const RankLayout& layout = {});
  ~OpContext();
  OpContext(const OpContext&) = delete;
  OpContext& operator=(const OpContext&) = delete;

  // A session's tensors (server/sessions/): rank r (of every group, as
  // ranks_ holds them) reads its A and W and writes its Y in the client's
  // buffers instead of the context's own, which Create then need not
  // allocate (BufferSizes a, w, y of 0). kNoBuffer keeps the context's own.
  // INVALID_ARGUMENT for a rank out of range. The caller checks the sizes
  // (SessionTensorNeeds) and keeps the buffers alive while the context is.
  absl::Status UseTensors(int r, engine::BufferId a, engine::BufferId w, engine::BufferId y);

  engine::Engine& engine() { return *engine_; }
  // Routes the schedules' engine calls through `engine`, a decorator of the
  // context's own engine that keeps its buffers, streams and events (e.g.
  // TimelineEngine), and returns the engine it replaces, to be put back.
  engine::Engine* UseEngine(engine::Engine* engine) { return std::exchange(engine_, engine); }
  const OpSpec& op() const { return op_; }
  // The graph's dtype: what GEMMs read, and what gathers move.
  DType dtype() const { return dtype_; }
  // What GEMMs write and reductions sum: GemmOutputDType(dtype()) (bf16 for fp8).
  DType reduced_dtype() const { return GemmOutputDType(dtype_); }
  // The dtype of one of the context's buffers: the inputs A and W and what is
  // gathered from A hold dtype(); outputs and partials hold reduced_dtype(),
  // except an all_gather's output, the gathered A itself.
  DType DTypeOf(engine::BufferId buffer) const;
  // The ranks the calls see now: a group's inside ForEachGroup (the schedules
  // are written for one group: rank(0..tp()-1)), else every rank of the op.
  int tp() const { return static_cast<int>(view_.size()); }
  // The ranks of one group: the degree the op's dims are split over.
  int group_size() const { return group_size_; }
  int groups() const { return static_cast<int>(ranks_.size()) / group_size_; }
  // The group ForEachGroup is in; -1 outside.
  int group() const { return group_; }
  const Mesh& mesh() const { return mesh_; }
  // Runs `fn` once per group with the calls seeing that group's ranks, then
  // sees every rank again. Inside a group already, runs `fn` once, for it, so
  // that entry points that call each other may each wrap their work in it.
  absl::Status ForEachGroup(absl::FunctionRef<absl::Status()> fn);
  // Runs `fn` seeing only `ranks` (indices among the ranks seen now), then
  // what it saw before: a schedule made of collectives over parts of its
  // group (the hierarchical all-reduce).
  absl::Status InView(const std::vector<int>& ranks, absl::FunctionRef<absl::Status()> fn);
  const LocalShapes& shapes() const { return shapes_; }
  const BufferSizes& sizes() const { return sizes_; }
  RankState& rank(int r) { return ranks_[view_[r]]; }
  // Whether rank r's output is its input buffer: a collective over one rank,
  // whose result is its input (Allocate aliases them; a session may too).
  bool OutputAliasesInput(int r) const {
    return At(r).y == At(r).a && At(r).a != engine::kNoBuffer;
  }
  std::vector<int> devices() const;

  // A byte range of `rows` rows of `cols` elements starting at row `row` of a
  // row-major buffer whose rows hold `cols` elements.
  engine::BufferRef Rows(engine::BufferId buffer, int64_t row, int64_t rows, int64_t cols) const;
  engine::MatrixRef Matrix(engine::BufferId buffer, int64_t row, int64_t ld) const;
  // Rank r's weights as the GEMM's B: [k, n] row-major, or [n, k] where the
  // dtype's GEMMs read them transposed (WeightsStoredTransposed).
  engine::MatrixRef Weights(int r) const;
  // A GEMM of rank r's weights with its dtype, k, n, B, the per-tensor scales
  // (fp8) and beside_collective set: the caller sets m, A, C and any batch.
  engine::GemmArgs WeightsGemm(int r) const;
  // Rank r's per-tensor scale of A (tensor 0) or W (tensor 1), an fp8 op's.
  engine::BufferRef ScaleOf(int r, int tensor) const;

  // Rank r's event (kind, index, step): created the first time it is named
  // (the first, untimed iteration) and reused after, found by an integer key,
  // with nothing built on the enqueue path. `step` tells apart the events of
  // one all-reduce of several (index) that a p2p all-reduce records.
  absl::StatusOr<engine::EventId> Event(int r, EventKind kind, int index = 0, int step = 0);
  absl::Status Record(int r, engine::StreamId stream, EventKind kind, int index = 0, int step = 0);
  absl::Status Wait(engine::StreamId stream, int event_rank, EventKind kind, int index = 0,
                    int step = 0);
  // `stream` waits for event (kind, index) of every rank.
  absl::Status WaitAll(engine::StreamId stream, EventKind kind, int index = 0, int step = 0);

  // Fork/join of one iteration: the comm stream waits for the compute stream
  // (at the start), and the compute stream for the comm stream (at the end).
  // Between them, the comm stream's transfers go over `transport`.
  absl::Status ForkComm(Transport transport);
  absl::Status JoinComm();
  // GEMMs enqueued now may run beside NCCL's kernels (forked, over NCCL): they
  // are marked so, and the backend leaves those kernels' SMs free
  // (engine.h, CollectiveSmBudget).
  bool gemms_beside_collective() const { return gemms_beside_collective_; }

  // A collective alone deferred in a layer step (job_runner.cc): from now on
  // every rank's compute and comm streams are its second comm stream (high
  // priority, beside the ops of the main streams), and its library
  // collectives use communicator channel 1, so that they never queue behind
  // the main ops' channel 0. FAILED_PRECONDITION where the engine has one
  // stream per role.
  absl::Status MoveToSideStreams();
  // A gradient all-reduce the run-time dispatcher sends (scheduler: dynamic):
  // every rank's streams are its deferred-lane stream (lowest priority), and
  // its library collectives use the deferred lane's communicator
  // (engine::kDeferredLaneChannel).
  void MoveToDeferredLane();
  int channel() const { return channel_; }

  // From now on rank r's GEMMs into Y (GemmRows) also write `activation` of
  // the rows they write into the same rows of `out` in their epilogue
  // (GemmArgs::epilogue); `out` has Y's rows, columns and dtype. The caller
  // sets it only where Y is written by such GEMMs alone, with beta 0 (one
  // rank, or a gemm op: layer_members.h, EpilogueFits); the engine must have
  // GemmEpilogues.
  void SetEpilogue(int r, engine::BufferId out, Activation activation);
  Activation epilogue() const { return epilogue_; }

 private:
  OpContext(engine::Engine& engine, const OpSpec& op, DType dtype, int group_size,
            const Mesh& mesh);
  const RankState& At(int r) const { return ranks_[view_[r]]; }
  absl::Status Allocate(const std::vector<int>& devices, const BufferSizes& sizes);
  bool OutputIsInput(const BufferSizes& sizes, const BufferDTypes& dtypes) const;

  engine::Engine* engine_;
  OpSpec op_;
  DType dtype_;
  LocalShapes shapes_;
  BufferSizes sizes_;
  std::vector<RankState> ranks_;  // every group's, group after group
  int group_size_;
  Mesh mesh_;
  std::vector<int> view_;  // indices into ranks_ of the ranks seen now
  int group_ = -1;
  std::map<engine::BufferId, DType> buffer_dtypes_;
  // What Allocate made, the destructor frees: never a caller's (UseTensors).
  std::vector<engine::BufferId> owned_;
  bool gemms_beside_collective_ = false;
  Activation epilogue_ = Activation::kNone;
  int channel_ = 0;
  // By (rank, kind, index, step) packed into one integer (EventKey).
  std::unordered_map<uint64_t, engine::EventId> events_;
};

// One layer op's schedules, a function per mode; EnqueueByMode runs the one a
// schedule names, so that the three ops share their dispatch.
struct ModeSchedules {
  const char* op;  // "ag_gemm", for errors
  absl::Status (*serial)(OpContext&, Transport);
  absl::Status (*bulk)(OpContext&, Transport);
  absl::Status (*chunked)(OpContext&, Transport, int chunks);
  absl::Status (*ring)(OpContext&, Transport, int chunks);
};
absl::Status EnqueueByMode(OpContext& ctx, const Schedule& schedule,
                           const ModeSchedules& schedules);

}  // namespace overlap::ops
