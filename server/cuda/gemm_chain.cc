#include "server/cuda/gemm_chain.h"

#include <vector>

#include "common/status_macros.h"
#include "server/cuda/cuda_check.h"

namespace overlap::cuda {

bool GemmFootprint::ConflictsWith(const GemmFootprint& other) const {
  auto touches = [](const GemmFootprint& g, const Range& written) {
    return g.a.Overlaps(written) || g.b.Overlaps(written) || g.c.Overlaps(written) ||
           g.d.Overlaps(written);
  };
  // c (and d) are always in a GEMM's footprint: a write into the other's
  // inputs or outputs is a hazard, and so is an output both write (the order
  // would decide).
  return touches(*this, other.c) || touches(other, c) || touches(*this, other.d) ||
         touches(other, d);
}

namespace {

// A stream's capture state and its current dependencies (the capture's tail).
struct CaptureTail {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* edges = nullptr;
  size_t count = 0;
};

absl::StatusOr<CaptureTail> QueryCapture(cudaStream_t stream) {
  CaptureTail t;
  CUDA_RETURN_IF_ERROR(
      cudaStreamGetCaptureInfo(stream, &t.status, &t.id, nullptr, &t.deps, &t.edges, &t.count));
  return t;
}

}  // namespace

absl::StatusOr<int> GemmChain::Before(cudaStream_t stream, const GemmFootprint& f) {
  ASSIGN_OR_RETURN(const CaptureTail tail, QueryCapture(stream));
  const auto& [status, id, deps, edges, count] = tail;
  absl::MutexLock lock(&mu_);
  pending_footprint_ = f;
  pending_workspace_ = 0;
  joined_ = nullptr;
  if (status != cudaStreamCaptureStatusActive) {
    capture_id_ = 0;
    last_ = nullptr;
    return 0;
  }
  if (id != capture_id_ || last_ == nullptr || f.ConflictsWith(last_footprint_)) return 0;
  std::vector<cudaGraphNode_t> nodes(deps, deps + count);
  std::vector<cudaGraphEdgeData> data(count);
  bool found = false;
  for (size_t i = 0; i < count; ++i) {
    if (edges != nullptr) data[i] = edges[i];
    if (nodes[i] == last_ && data[i].type == cudaGraphDependencyTypeDefault) {
      data[i].type = cudaGraphDependencyTypeProgrammatic;
      data[i].from_port = cudaGraphKernelNodePortLaunchCompletion;
      found = true;
    }
  }
  // Anything but the previous GEMM at the tail (a kernel, a copy) came after
  // it with a full edge: then there is nothing to gain.
  if (!found) return 0;
  CUDA_RETURN_IF_ERROR(cudaStreamUpdateCaptureDependencies(stream, nodes.data(), data.data(), count,
                                                           cudaStreamSetCaptureDependencies));
  joined_ = last_;
  pending_workspace_ = 1 - last_workspace_;
  return pending_workspace_;
}

absl::Status GemmChain::After(cudaStream_t stream) {
  ASSIGN_OR_RETURN(const CaptureTail tail, QueryCapture(stream));
  const auto& [status, id, deps, edges, count] = tail;
  absl::MutexLock lock(&mu_);
  last_ = nullptr;
  if (status != cudaStreamCaptureStatusActive) {
    capture_id_ = 0;
    return absl::OkStatus();
  }
  capture_id_ = id;
  if (count == 1) {
    cudaGraphNodeType type;
    CUDA_RETURN_IF_ERROR(cudaGraphNodeGetType(deps[0], &type));
    // Programmatic edges join kernel nodes only.
    if (type == cudaGraphNodeTypeKernel) last_ = deps[0];
  }
  last_footprint_ = pending_footprint_;
  last_workspace_ = pending_workspace_;
  if (joined_ != nullptr) {
    cudaGraphNode_t previous = joined_;
    cudaGraphEdgeData full{};
    joined_ = nullptr;
    CUDA_RETURN_IF_ERROR(cudaStreamUpdateCaptureDependencies(stream, &previous, &full, 1,
                                                             cudaStreamAddCaptureDependencies));
  }
  return absl::OkStatus();
}

}  // namespace overlap::cuda
