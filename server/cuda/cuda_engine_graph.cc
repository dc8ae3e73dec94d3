// Steady-state replay: stream capture into CUDA graphs, one executable graph per
// captured iteration, launched on the origin stream. The captured work may span
// devices (streams of other GPUs join through cross-device event waits).
#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/cuda/cuda_check.h"
#include "server/cuda/cuda_engine_impl.h"
#include "server/cuda/scoped_device.h"

namespace overlap::cuda {

void CudaEngineImpl::GraphExecDeleter::operator()(cudaGraphExec_t exec) const noexcept {
  const cudaError_t error = cudaGraphExecDestroy(exec);
  if (error != cudaSuccess) {
    GetLogger("cuda")->warn("cudaGraphExecDestroy: {}", cudaGetErrorString(error));
  }
}

absl::Status CudaEngineImpl::BeginCapture(engine::StreamId origin) {
  if (!config_.graph_replay) {
    return absl::FailedPreconditionError("graph replay is off (graph_replay: false)");
  }
  ASSIGN_OR_RETURN(const StreamSlot* slot, LookupStream(origin));
  ScopedDevice guard(slot->device);
  RETURN_IF_ERROR(guard.status());
  // Thread-local: other threads (telemetry, other jobs' devices) keep making
  // CUDA calls that a global capture would refuse.
  CUDA_RETURN_IF_ERROR(
      cudaStreamBeginCapture(slot->stream.get(), cudaStreamCaptureModeThreadLocal));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<engine::StreamId>> CudaEngineImpl::JoinedStreams(
    engine::StreamId origin) {
  ASSIGN_OR_RETURN(const StreamSlot* slot, LookupStream(origin));
  auto capture_of = [](const StreamSlot& s) -> absl::StatusOr<unsigned long long> {
    ScopedDevice guard(s.device);
    RETURN_IF_ERROR(guard.status());
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    CUDA_RETURN_IF_ERROR(cudaStreamGetCaptureInfo(s.stream.get(), &status, &id));
    return status == cudaStreamCaptureStatusActive ? id : 0;
  };
  ASSIGN_OR_RETURN(const unsigned long long capture, capture_of(*slot));
  if (capture == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("JoinedStreams: stream ", origin, " is not capturing"));
  }
  std::vector<engine::StreamId> joined;
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (static_cast<engine::StreamId>(i) == origin) continue;
    ASSIGN_OR_RETURN(const unsigned long long id, capture_of(streams_[i]));
    if (id == capture) joined.push_back(static_cast<engine::StreamId>(i));
  }
  return joined;
}

absl::StatusOr<engine::GraphId> CudaEngineImpl::EndCapture(engine::StreamId origin) {
  ASSIGN_OR_RETURN(const StreamSlot* slot, LookupStream(origin));
  ScopedDevice guard(slot->device);
  RETURN_IF_ERROR(guard.status());
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(slot->stream.get(), &graph);
  if (ended != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // an invalidated capture is not sticky: clear it
    return CudaErrorToStatus(ended, "cudaStreamEndCapture", __FILE__, __LINE__);
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_RETURN_IF_ERROR(made);
  absl::MutexLock lock(&mu_);
  const engine::GraphId id = next_graph_id_++;
  graphs_[id] = GraphEntry{slot->device, std::shared_ptr<CUgraphExec_st>(exec, GraphExecDeleter{})};
  return id;
}

absl::Status CudaEngineImpl::LaunchGraph(engine::GraphId graph, engine::StreamId stream) {
  ASSIGN_OR_RETURN(const StreamSlot* slot, LookupStream(stream));
  ASSIGN_OR_RETURN(GraphEntry entry, LookupGraph(graph));
  if (entry.device != slot->device) {
    return absl::InvalidArgumentError(absl::StrCat("LaunchGraph: graph ", graph,
                                                   " was captured on device ", entry.device,
                                                   ", stream ", stream, " is on ", slot->device));
  }
  ScopedDevice guard(slot->device);
  RETURN_IF_ERROR(guard.status());
  CUDA_RETURN_IF_ERROR(cudaGraphLaunch(entry.exec.get(), slot->stream.get()));
  return absl::OkStatus();
}

absl::StatusOr<CudaEngineImpl::GraphEntry> CudaEngineImpl::LookupGraph(
    engine::GraphId graph) const {
  absl::MutexLock lock(&mu_);
  return CopyEntry(graphs_, graph, "graph");
}

void CudaEngineImpl::DestroyGraph(engine::GraphId graph) {
  std::optional<GraphEntry> taken;
  {
    absl::MutexLock lock(&mu_);
    taken = TakeEntry(graphs_, graph);
  }
  // Released here, outside the lock; cudaGraphExecDestroy waits for nothing, a launch
  // already queued keeps running.
}

}  // namespace overlap::cuda
