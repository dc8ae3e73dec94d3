// The layer step's members (layer_step.h): each planned op of the step with
// its context, and what enqueues them; shared by the planned step
// (layer_step.cc) and the run-time dispatched one (dynamic_step.cc). Internal
// to the runner.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/graph.h"
#include "server/ops/layer_ops.h"
#include "server/ops/op_context.h"
#include "server/runner/layer_plan.h"

namespace overlap::runner {

using ops::OpContext;
using ops::Schedule;

// How an op's input is made from its producer's output (OpSpec::input), on
// each device, where the producer's rank on that device wrote it.
//
// An alias reads the producer's output buffer itself: no copy and no launch.
// It needs the bytes the consumer would read to be the bytes the producer
// wrote, and nothing to write them while the consumer reads:
//   - no activation, the same dtype, and not an fp8 input (the pass quantizes
//     an fp8 input with the chain's scale, kChainFp8Dequant: other bytes);
//   - the producer's local output rows x cols are the consumer's local A as
//     its schedules read it (an ag_gemm's A is its shard before the gather;
//     LocalShapesFor), row-major from offset 0, on the same devices;
//   - no schedule writes its A (the GEMMs read it, the gathers and
//     reductions send it: ops/collective_ops.cc), so the consumer never
//     writes through the alias;
//   - the producer writes its output once per iteration, before the
//     consumer's input-ready event: an op read by another is never cut into
//     pieces (layer_plan.cc, Cuttable), and the step synchronizes its devices
//     after every iteration (OpRun::Timed), so the next iteration's output
//     never lands while this one's consumer still reads.
// Else one elementwise pass per rank: fused with the activation, or a copy
// (the cast). The producer's buffers live as long as the step's members, as
// the consumer's do: the step frees them together.
//
// An epilogue edge is a fused one whose pass the producer's GEMM does in its
// epilogue (cuBLASLt's GELU_AUX): the GEMM writes its output and the
// consumer's input, and no pass reads the output back (EpilogueFits).
enum class Edge {
  kSeeded,  // no producer: the op's own seeded inputs
  kAlias,
  kFused,
  kCopy,
  kEpilogue,
};

// The edge into `consumer` from `producer`, each over groups of its degree,
// in a graph of `dtype`.
Edge EdgeFor(const PlannedOp& consumer, int consumer_degree, const PlannedOp& producer,
             int producer_degree, DType dtype);
// As the report names it: "alias", "fused swiglu", "copy", "epilogue gelu";
// "" for kSeeded.
std::string EdgeName(Edge edge, Activation activation);
// Whether the edge is made by an elementwise pass of the consumer's
// (EnqueueWiredInput): fused or copy; an alias or an epilogue has none.
inline bool EdgeRunsAPass(Edge edge) { return edge == Edge::kFused || edge == Edge::kCopy; }

// Whether a fused edge may be the producer's GEMM epilogue instead, on an
// engine with GemmEpilogues: a gelu (cuBLASLt's one activation epilogue
// without a bias) in bf16 or fp16 with rows of whole 16-byte units, the bytes the consumer reads
// being the bytes the producer writes but for the activation (what an alias needs: the same dtype,
// not fp8, the same local rows and columns, on the same devices, the producer whole), and the
// producer's output written by its GEMM alone, whole, on each rank (one rank, or a gemm op): not
// gathered, reduced or scattered after.
bool EpilogueFits(const PlannedOp& consumer, int consumer_degree, const PlannedOp& producer,
                  int producer_degree, DType dtype);

// A planned op (layer_plan.h) as the step runs it.
struct Member : PlannedOp {
  std::unique_ptr<OpContext> ctx;
  size_t sent = 0;  // the pieces (or whole op) enqueued this iteration
  // The member whose output is this one's input (OpSpec::input); null: seeded inputs.
  Member* input_from = nullptr;
  Edge edge = Edge::kSeeded;
};

// The buffers `op` (over groups of `degree`, its input made by `edge`)
// allocates of `sizes`: not an aliased input, nor a one-rank collective's
// output, which is that input. The step allocates by it and admission
// estimates by it (layer_memory.h).
ops::BufferSizes OwnBufferSizes(Edge edge, const OpSpec& op, int degree, ops::BufferSizes sizes);
// Member `m`'s: OwnBufferSizes of its edge.
ops::BufferSizes OwnBufferSizes(const Member& m, int degree, ops::BufferSizes sizes);

// Points an aliased member's input (and a one-rank collective's output) at
// its producer's output, rank by rank on each device; a no-op for other
// edges. Both contexts exist; `m`'s was created with OwnBufferSizes.
absl::Status AliasInput(Member& m);

// Points an epilogue member's producer's GEMM at m's input, rank by rank on
// each device (OpContext::SetEpilogue); a no-op for other edges.
absl::Status WireEpilogue(Member& m);

// Member m's input made from its producer's output on m's compute streams,
// and the input-ready event every local rank of m waits for (a no-op for a
// member with seeded inputs; no pass for an alias or an epilogue).
absl::Status EnqueueWiredInput(Member& m);

// Each device's main compute stream: the layer step's main streams, which
// every op of a mesh reaches through its rank on that device.
using MainStreams = std::map<int, engine::StreamId>;
MainStreams MainStreamsOf(OpContext& main);

// Deferred member `m` sends its next piece, or the whole op: its side streams
// wait for the main streams to get here first.
absl::Status SendDeferred(Member& m, const MainStreams& main);

// Whether `m` has pieces (or its whole op) not yet sent this iteration.
bool Unsent(const Member& m);

// The main streams wait for the deferred ops that join before `id` ("" = the
// end), each first sending what it has not sent yet.
absl::Status JoinBefore(std::vector<Member>& members, const std::string& id,
                        const MainStreams& main);

}  // namespace overlap::runner
