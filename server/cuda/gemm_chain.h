// Programmatic edges between consecutive GEMMs captured on one stream.
//
// A ring schedule runs one GEMM as row pieces on the compute stream. In a
// replayed graph each boundary between two pieces waits until the whole previous
// kernel has finished and flushed: the last wave's tail of one piece plus the
// ramp-up of the next, 4-20 us each (bench/probes/piece_edges). When the two GEMMs share
// no byte that either of them writes, nothing but time orders them, and an edge
// of type programmatic from the previous kernel's LaunchCompletion port lets the
// next one start once every block of the previous one has started, filling the
// SMs its last wave leaves idle.
//
// Three rules keep that sound:
// - only two GEMMs whose footprints do not conflict are joined that way;
// - right after the next GEMM is launched, the previous one is added back to the
//   stream's capture dependencies with a full edge, so whatever follows on the
//   stream (event records, kernels, copies, the GEMM after next) waits for both;
// - the two GEMMs that may run together use different cuBLASLt workspaces
//   (Before says which), since a split-K algorithm keeps partials there.
// Outside a capture nothing changes: eager launches keep full stream order.
#pragma once

#include <cuda_runtime_api.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace overlap::cuda {

// The bytes one GEMM reads and writes, [begin, end) each.
struct GemmFootprint {
  struct Range {
    const char* begin = nullptr;
    const char* end = nullptr;
    bool Overlaps(const Range& other) const { return begin < other.end && other.begin < end; }
  };
  Range a, b, c;  // c counts as written whatever beta is
  Range d;        // an epilogue's output (written); empty without one

  // True when running both at once could change either's result.
  bool ConflictsWith(const GemmFootprint& other) const;
};

// One per stream. Before and After bracket each GEMM launch on that stream.
class GemmChain {
 public:
  // Before a GEMM with footprint `f` is enqueued on `stream`: inside a capture,
  // turns the edge from the stream's previous GEMM into a programmatic one when
  // that GEMM is still the stream's tail (events waited on may sit beside it)
  // and the two do not conflict. Returns the workspace (0 or 1) to use.
  absl::StatusOr<int> Before(cudaStream_t stream, const GemmFootprint& f);
  // After it was enqueued: remembers its last node and gives the previous GEMM
  // its full edge back.
  absl::Status After(cudaStream_t stream);

 private:
  absl::Mutex mu_;
  unsigned long long capture_id_ ABSL_GUARDED_BY(mu_) = 0;
  cudaGraphNode_t last_ ABSL_GUARDED_BY(mu_) = nullptr;  // the previous GEMM's last node
  GemmFootprint last_footprint_ ABSL_GUARDED_BY(mu_);
  int last_workspace_ ABSL_GUARDED_BY(mu_) = 0;
  // Between Before and After: the footprint and workspace of the GEMM being
  // launched, and the previous GEMM when its edge was made programmatic.
  GemmFootprint pending_footprint_ ABSL_GUARDED_BY(mu_);
  int pending_workspace_ ABSL_GUARDED_BY(mu_) = 0;
  cudaGraphNode_t joined_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace overlap::cuda
