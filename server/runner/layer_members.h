// The layer step's members (layer_step.h): each op of the step with its
// schedule, its context and where it runs, and what enqueues them; shared by
// the planned step (layer_step.cc) and the run-time dispatched one
// (dynamic_step.cc). Internal to the runner.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/graph.h"
#include "server/ops/layer_ops.h"
#include "server/ops/op_context.h"
#include "common/schedule.h"

namespace overlap::runner {

using ops::OpContext;
using ops::Schedule;

struct Member {
  int spec_index = 0;  // the op's index in the spec: its input seeds
  OpSpec op;
  Schedule schedule;
  std::unique_ptr<OpContext> ctx;
  bool deferred = false;              // on the side streams
  // scheduler: dynamic: a deferred member nothing waits on, sent chunk by
  // chunk on the deferred lane by the run-time dispatcher (dynamic_step.h).
  bool on_deferred_lane = false;
  std::string join_before;            // the first op that waits for it; "" = the end of the step
  std::vector<std::string> bucketed;  // a bucket: the ids of the all-reduces it merges
  // A chunked all-reduce (JobSpec::chunk_kib): its rows in pieces, the first
  // sent where it stands and each next one after the next op on the main
  // streams; empty = whole. `sent` counts the pieces enqueued this iteration.
  std::vector<ops::RowRange> pieces;
  size_t sent = 0;
  double alone_ms = 0;  // its collective alone (a bucket: its members'), from their own runs
  // How much longer than alone its collective runs beside the GEMM ops
  // (BesideGemmsFactors, layer_step.h): what the dispatcher expects of a chunk.
  double beside_gemms = 0;
  // The member whose output is this one's input (OpSpec::input); null: seeded inputs.
  const Member* input_from = nullptr;
};

// Whether another op reads this one's output: it must be whole when that one
// runs, so it is not cut into pieces sent later.
bool IsRead(const JobSpec& spec, const OpSpec& op);

// Whether an op reads another's output or is read by another: its tensors
// are its own, not a bucket's.
bool InChain(const JobSpec& spec, const OpSpec& op);

// Member m's input made from its producer's output on m's compute streams
// (a no-op for a member with seeded inputs).
absl::Status EnqueueWiredInput(Member& m);

// Each device's main compute stream: the layer step's main streams, which
// every op of a mesh reaches through its rank on that device.
using MainStreams = std::map<int, engine::StreamId>;
MainStreams MainStreamsOf(OpContext& main);

// Deferred member `m` sends its next piece, or the whole op: its side streams
// wait for the main streams to get here first.
absl::Status SendDeferred(Member& m, const MainStreams& main);

// Cuts each deferred all-reduce larger than `chunk_kib` KiB into pieces of
// about that many rows' bytes; not a hierarchical one, whose rows must divide
// over the mesh, nor one another op reads. `lane_only`: only the deferred
// lane's members, buckets among them (scheduler: dynamic); otherwise every
// deferred member but buckets.
void Chunk(std::vector<Member>& members, const JobSpec& spec, int chunk_kib, bool lane_only);

// Whether Chunk may cut `m` (an all-reduce, not hierarchical, not read by another op).
bool Cuttable(const JobSpec& spec, const Member& m);
// Cuts `m`'s rows into pieces of about `chunk_bytes` each (`es` bytes an
// element); leaves it whole when it is no larger.
void CutIntoPieces(Member& m, int64_t chunk_bytes, int64_t es);

// How much longer than alone a collective is taken to run beside the GEMM ops
// (LayerOrder's fit, the dispatcher's chunk time) where the node keeps no
// calibration for its transport: they contend for HBM and NVLink and, over
// NCCL, for SMs. Where one is kept, its measured slowdown beside that
// transport is used instead (BesideGemmsFactors, layer_step.h).
inline constexpr double kBesideGemmsFactor = 1.5;

// `m`'s factor: its own, or kBesideGemmsFactor where none was set.
inline double BesideGemmsOf(const Member& m) {
  return m.beside_gemms > 0 ? m.beside_gemms : kBesideGemmsFactor;
}

// What `m` sends in one iteration: its pieces, or 1 (the whole op).
int Pieces(const Member& m);

// Whether `m` has pieces (or its whole op) not yet sent this iteration.
bool Unsent(const Member& m);

// The main streams wait for the deferred ops that join before `id` ("" = the
// end), each first sending what it has not sent yet.
absl::Status JoinBefore(std::vector<Member>& members, const std::string& id,
                        const MainStreams& main);

}  // namespace overlap::runner
