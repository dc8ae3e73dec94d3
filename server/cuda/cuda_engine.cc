#include "server/cuda/cuda_engine.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/cuda/cuda_check.h"
#include "server/cuda/cuda_engine_impl.h"
#include "server/cuda/driver_api.h"
#include "server/cuda/scoped_device.h"
#include "server/engine/gpu_identity.h"
#include "server/engine/xid_log.h"

namespace overlap::cuda {
namespace {

// Creating a communicator in a fresh process took 2.6-3.6 s on H200 x2: a short
// collective timeout (tests use 1-5 s) must not fail it.
constexpr double kMinInitTimeoutS = 30;

std::atomic<int>& LiveEngines() {
  static std::atomic<int> live{0};
  return live;
}

std::string DottedVersion(int code, int major_div, int minor_div) {
  if (code <= 0) return "none";
  return absl::StrCat(code / major_div, ".", (code % major_div) / minor_div, ".", code % minor_div);
}

}  // namespace

ElemType ToElemType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ElemType::kF32;
    case DType::kF16:
      return ElemType::kF16;
    case DType::kBF16:
      return ElemType::kBF16;
    case DType::kFP8:
      return ElemType::kFP8;
  }
  return ElemType::kF32;
}

absl::StatusOr<std::unique_ptr<engine::Engine>> CreateCudaEngine(const DaemonConfig& config) {
  ASSIGN_OR_RETURN(std::unique_ptr<CudaEngine> engine, CreateCudaEngineTyped(config));
  return std::unique_ptr<engine::Engine>(std::move(engine));
}

absl::StatusOr<std::unique_ptr<CudaEngine>> CreateCudaEngineTyped(const DaemonConfig& config) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it for whoever asks next
    return absl::UnavailableError(
        absl::StrCat("no GPU visible: ", cudaGetErrorName(error), ": ", cudaGetErrorString(error)));
  }
  if (count <= 0) return absl::UnavailableError("no GPU visible: cudaGetDeviceCount found 0");
  if (config.collective_timeout_s <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective_timeout_s must be positive, got ", config.collective_timeout_s));
  }
  if (config.ranks_per_gpu < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ranks_per_gpu must be >= 1, got ", config.ranks_per_gpu));
  }
  if (config.gemm_workspace_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemm_workspace_bytes must be >= 0, got ", config.gemm_workspace_bytes));
  }
  // NVLink multicast (NVLS) stays off unless asked for; it must be set before the
  // first communicator is made, and overrides whatever the environment had.
  if (!config.nvls_enable) setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/1);
  // The ratio is process-wide (scoped_device.h): a second engine may not change
  // it under a live one.
  if (LiveEngines().load() > 0 && RanksPerGpu().load() != config.ranks_per_gpu) {
    return absl::FailedPreconditionError(
        absl::StrCat("ranks_per_gpu ", config.ranks_per_gpu, ": a CUDA engine with ranks_per_gpu ",
                     RanksPerGpu().load(), " is still alive in this process"));
  }
  SetRanksPerGpu(config.ranks_per_gpu);
  ASSIGN_OR_RETURN(std::unique_ptr<CudaEngineImpl> engine,
                   CudaEngineImpl::Create(config, count * config.ranks_per_gpu));
  return std::unique_ptr<CudaEngine>(std::move(engine));
}

CudaEngineImpl::CudaEngineImpl(const DaemonConfig& config)
    : config_(config),
      comms_(std::make_unique<NcclComms>(std::max(config.collective_timeout_s, kMinInitTimeoutS),
                                         config.nccl_nonblocking)) {
  ++LiveEngines();
  // A driver call that loses the context makes the engine unhealthy, as a
  // runtime call's sticky error does.
  SetLostContextHook(&MarkStickyErrorSeen);
}

absl::StatusOr<std::unique_ptr<CudaEngineImpl>> CudaEngineImpl::Create(const DaemonConfig& config,
                                                                       int device_count) {
  std::unique_ptr<CudaEngineImpl> engine(new CudaEngineImpl(config));
  engine->streams_.resize(static_cast<size_t>(device_count) * kStreamsPerDevice);
  for (int device = 0; device < device_count; ++device) {
    engine->devices_.push_back(std::make_unique<DeviceState>());
    const absl::Status status = engine->InitDevice(device);
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("setting up device ", device, ": ", status.message()));
    }
  }
  for (const auto& state : engine->devices_) {
    if (config.nccl_overlap_ctas >= state->sm_count) {
      return absl::InvalidArgumentError(absl::StrCat("nccl_overlap_ctas ", config.nccl_overlap_ctas,
                                                     " leaves no SM for GEMMs: ", "device ",
                                                     state->index, " has ", state->sm_count));
    }
  }
  engine->EnablePeerAccess();
  std::vector<std::string> pci_bus_ids;
  for (const auto& state : engine->devices_) pci_bus_ids.push_back(state->pci_bus_id);
  // Xid counts kept across restarts where the daemon has a state directory.
  std::unique_ptr<engine::XidLog> xid_log;
  if (!config.state_dir.empty()) {
    absl::StatusOr<std::unique_ptr<engine::XidLog>> opened =
        engine::XidLog::Open(config.state_dir, engine::CurrentBootId());
    if (opened.ok()) {
      xid_log = std::move(opened).value();
    } else {
      GetLogger("cuda")->warn("Xid counts will start from 0 at each restart: {}",
                              opened.status().ToString());
    }
  }
  engine->nvml_ = NvmlTelemetry::Open(pci_bus_ids, std::move(xid_log));
  if (config.launch_gate) {
    absl::StatusOr<std::unique_ptr<LaunchGate>> gate = LaunchGate::Create();
    if (gate.ok()) {
      engine->gate_ = std::move(gate).value();
    } else {  // timings then include the host's enqueue latency, nothing worse
      GetLogger("cuda")->warn("no launch gates: {}", gate.status().ToString());
    }
  }
  for (const auto& state : engine->devices_) {
    GetLogger("cuda")->info("device {}: {} ({}), {} SMs, pool {} bytes, {} reserved", state->index,
                            state->name, state->pci_bus_id, state->sm_count,
                            state->pool->capacity(), state->reserved_bytes);
  }
  if (config.ranks_per_gpu > 1) {
    GetLogger("cuda")->warn(
        "{} ranks per GPU: copies and a reduction kernel stand in for NCCL between ranks of one "
        "GPU; timings here say nothing about a node with a GPU per rank",
        config.ranks_per_gpu);
  }
  if (config.nccl_overlap_ctas > 0) {
    GetLogger("cuda")->info("NCCL beside a GEMM: at most {} CTAs; the GEMM leaves them free",
                            config.nccl_overlap_ctas);
  }
  return engine;
}

absl::Status CudaEngineImpl::InitDevice(int device) {
  ScopedDevice guard(device);
  RETURN_IF_ERROR(guard.status());
  DeviceState& state = *devices_[device];
  state.index = device;
  cudaDeviceProp props;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&props, GpuOf(device)));
  state.name = props.name;
  state.model_name = props.name;
  state.uuid = engine::FormatGpuUuid(props.uuid.bytes);
  const int ranks_per_gpu = config_.ranks_per_gpu;
  // The name enters tuning keys and bench reports: choices made on a shared GPU
  // must never be taken for a real node's.
  if (ranks_per_gpu > 1) absl::StrAppend(&state.name, " (shared by ", ranks_per_gpu, " ranks)");
  state.sm_count = props.multiProcessorCount;
  char pci[64] = {};
  CUDA_RETURN_IF_ERROR(cudaDeviceGetPCIBusId(pci, sizeof(pci), GpuOf(device)));
  state.pci_bus_id = pci;

  // Numerically lower is higher priority: comm streams get `greatest`.
  int least = 0, greatest = 0;
  CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  // A share of the GPU (`80%`) is for all of its ranks together, a size per rank.
  ASSIGN_OR_RETURN(state.pool, DevicePool::Create(device, config_.pool_bytes_per_device,
                                                  ranks_per_gpu - device % ranks_per_gpu,
                                                  config_.pool_percent_of_gpu / ranks_per_gpu));

  size_t workspace = static_cast<size_t>(config_.gemm_workspace_bytes) / 256 * 256;
  const size_t capacity = state.pool->capacity();
  // Compute streams chain GEMMs with programmatic edges: a second workspace each.
  const bool chains = config_.programmatic_edges && config_.graph_replay;
  const size_t workspaces = 2 * kStreamsPerRole + (chains ? kStreamsPerRole : 0);
  if (workspace * workspaces > capacity / 4) {
    workspace = capacity / 4 / workspaces / 256 * 256;
    GetLogger("cuda")->warn("device {}: GEMM workspace cut to {} bytes per stream (pool {} bytes)",
                            device, workspace, capacity);
  }
  constexpr engine::StreamRole kRoles[] = {engine::StreamRole::kCompute, engine::StreamRole::kComm,
                                           engine::StreamRole::kDeferred};
  for (int role = 0; role < 3; ++role) {
    for (int index = 0; index < kStreamsPerRole; ++index) {
      StreamSlot& slot = streams_[device * kStreamsPerDevice + role * kStreamsPerRole + index];
      slot.device = device;
      slot.role = kRoles[role];
      // The critical lane at the top; GEMMs and the deferred lane at the bottom.
      const bool critical = slot.role == engine::StreamRole::kComm;
      ASSIGN_OR_RETURN(slot.stream, CudaStream::Create(device, critical ? greatest : least));
      if (device == 0 && index == 0 && critical) lane_priorities_ = {greatest, least};
      const bool chained = chains && slot.role == engine::StreamRole::kCompute;
      // The deferred lane runs no GEMM: no workspace.
      if (workspace > 0 && slot.role != engine::StreamRole::kDeferred) {
        for (int w = 0; w < (chained ? 2 : 1); ++w) {
          ASSIGN_OR_RETURN(slot.workspace[w], state.pool->Allocate(workspace));
        }
        slot.workspace_bytes = workspace;
      }
      if (chained) slot.chain = std::make_unique<GemmChain>();
      ASSIGN_OR_RETURN(slot.fence, CudaEvent::Create(device, /*timing=*/false));
    }
  }
  state.reserved_bytes = state.pool->BytesInUse();
  ASSIGN_OR_RETURN(state.gemm, GemmLt::Create(device));
  return absl::OkStatus();
}

void CudaEngineImpl::EnablePeerAccess() {
  const int n = DeviceCount();
  peer_access_.assign(n, std::vector<bool>(n, false));
  for (int from = 0; from < n; ++from) {
    peer_access_[from][from] = true;
    ScopedDevice guard(from);
    if (!guard.status().ok()) continue;
    for (int to = 0; to < n; ++to) {
      if (GpuOf(to) == GpuOf(from)) {  // ranks of one GPU
        peer_access_[from][to] = true;
        continue;
      }
      int can = 0;
      if (cudaDeviceCanAccessPeer(&can, GpuOf(from), GpuOf(to)) != cudaSuccess || can == 0) {
        continue;
      }
      const cudaError_t error = cudaDeviceEnablePeerAccess(GpuOf(to), 0);
      if (error == cudaSuccess || error == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();  // "already enabled" is recorded as the last error
        peer_access_[from][to] = true;
      } else {
        cudaGetLastError();
        GetLogger("cuda")->warn("peer access {} -> {} unavailable: {}", from, to,
                                cudaGetErrorString(error));
      }
    }
  }
}

CudaEngineImpl::~CudaEngineImpl() {
  std::vector<int> all;
  for (int device = 0; device < DeviceCount(); ++device) all.push_back(device);
  const absl::Status status = WaitIdle(all);
  if (!status.ok()) GetLogger("cuda")->warn("engine shutdown: {}", status.ToString());
  // Mappings of other processes' memory the caller never freed.
  std::map<engine::BufferId, BufferEntry> buffers;
  {
    absl::MutexLock lock(&mu_);
    buffers.swap(buffers_);
  }
  for (const auto& [id, entry] : buffers) {
    if (entry.imported) ReleaseImported(id, *entry.imported);
  }
  comms_.reset();
  --LiveEngines();
}

engine::DeviceInfo CudaEngineImpl::GetDeviceInfo(int device) const {
  engine::DeviceInfo info;
  info.index = device;
  if (!ValidDevice(device)) return info;
  const DeviceState& state = *devices_[device];
  info.name = state.name;
  info.pci_bus_id = state.pci_bus_id;
  info.model_name = state.model_name;
  info.uuid = state.uuid;
  info.nvml_pci_bus_id = engine::NvmlPciBusId(state.pci_bus_id);
  if (nvml_ != nullptr) info.nvml_index = nvml_->Index(device);
  info.memory_bytes = static_cast<int64_t>(state.pool->capacity() - state.reserved_bytes);
  info.total_memory_bytes = static_cast<int64_t>(state.pool->device_total_bytes());
  return info;
}

engine::DeviceTelemetry CudaEngineImpl::Telemetry(int device) const {
  return nvml_ ? nvml_->Read(device) : engine::DeviceTelemetry{};
}

absl::StatusOr<double> CudaEngineImpl::EnergyJoules(int device) const {
  if (nvml_ == nullptr) return absl::UnimplementedError("no NVML: no energy counter");
  return nvml_->EnergyJoules(device);
}

absl::Duration CudaEngineImpl::EnergyCounterPeriod(int device) const {
  return nvml_ == nullptr ? absl::ZeroDuration() : nvml_->EnergyCounterPeriod(device);
}

absl::StatusOr<int64_t> CudaEngineImpl::ForgetXids(int device) const {
  if (!ValidDevice(device)) {
    return absl::InvalidArgumentError(absl::StrCat("no device ", device));
  }
  if (nvml_ == nullptr) return absl::FailedPreconditionError("no NVML: Xid errors are not counted");
  return nvml_->ForgetXids(device);
}

engine::BackendVersions CudaEngineImpl::Versions() const {
  engine::BackendVersions versions;
  int runtime = 0, driver = 0, nccl = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  if (ncclGetVersion(&nccl) != ncclSuccess) nccl = 0;
  // CUDA: major*1000 + minor*10; NCCL >= 2.9: major*10000 + minor*100 + patch;
  // cuBLAS: major*10000 + minor*100 + patch.
  versions.cuda_runtime =
      runtime > 0 ? absl::StrCat(runtime / 1000, ".", (runtime % 1000) / 10) : "none";
  versions.cuda_driver =
      driver > 0 ? absl::StrCat(driver / 1000, ".", (driver % 1000) / 10) : "none";
  versions.nccl = DottedVersion(nccl, 10000, 100);
  versions.cublas = DottedVersion(static_cast<int>(cublasLtGetVersion()), 10000, 100);
  return versions;
}

int64_t CudaEngineImpl::MemoryInUse(int device) const {
  if (!ValidDevice(device)) return 0;
  const DeviceState& state = *devices_[device];
  return static_cast<int64_t>(state.pool->BytesInUse() - state.reserved_bytes);
}

engine::StreamId CudaEngineImpl::GetStream(int device, engine::StreamRole role, int index) {
  if (!ValidDevice(device) || index < 0 || index >= kStreamsPerRole) return -1;
  const int role_index = role == engine::StreamRole::kCompute ? 0
                         : role == engine::StreamRole::kComm  ? 1
                                                              : 2;
  return device * kStreamsPerDevice + role_index * kStreamsPerRole + index;
}

std::string CudaEngineImpl::DescribeLanes() const {
  auto ctas = [](int n) { return n > 0 ? absl::StrCat("at most ", n, " CTAs") : "NCCL's CTAs"; };
  return absl::StrCat("critical lane: comm streams at priority ", lane_priorities_.first,
                      ", NCCL channels 0-1 (", ctas(0), "; beside a GEMM ",
                      ctas(config_.nccl_overlap_ctas), "); deferred lane: streams at priority ",
                      lane_priorities_.second, ", NCCL channel ", engine::kDeferredLaneChannel,
                      " (", ctas(config_.deferred_lane_ctas), ")");
}

int CudaEngineImpl::MultiprocessorCount(int device) const {
  return ValidDevice(device) ? devices_[device]->sm_count : 0;
}

bool CudaEngineImpl::Healthy() const { return healthy_.load() && !StickyErrorSeen(); }

absl::StatusOr<const CudaEngineImpl::StreamSlot*> CudaEngineImpl::LookupStream(
    engine::StreamId stream) const {
  if (stream < 0 || static_cast<size_t>(stream) >= streams_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown stream ", stream));
  }
  return &streams_[stream];
}

absl::StatusOr<CudaEngineImpl::BufferEntry> CudaEngineImpl::LookupBuffer(
    engine::BufferId buffer) const {
  absl::MutexLock lock(&mu_);
  return CopyEntry(buffers_, buffer, "buffer");
}

absl::StatusOr<CudaEngineImpl::EventEntry> CudaEngineImpl::LookupEvent(
    engine::EventId event) const {
  absl::MutexLock lock(&mu_);
  return CopyEntry(events_, event, "event");
}

absl::StatusOr<char*> CudaEngineImpl::Resolve(const engine::BufferRef& ref, int device,
                                              const char* what) const {
  absl::StatusOr<BufferEntry> entry = LookupBuffer(ref.buffer);
  if (!entry.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", entry.status().message()));
  }
  if (device >= 0 && entry->device != device) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": buffer ", ref.buffer, " is on device ",
                                                   entry->device, ", expected device ", device));
  }
  if (ref.offset > entry->bytes || ref.bytes > entry->bytes - ref.offset) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": range [", ref.offset, ", +", ref.bytes,
                                                   ") exceeds buffer ", ref.buffer, " of ",
                                                   entry->bytes, " bytes"));
  }
  return entry->ptr + ref.offset;
}

absl::StatusOr<engine::BufferId> CudaEngineImpl::Allocate(int device, size_t bytes) {
  if (!ValidDevice(device)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown device ", device));
  }
  ASSIGN_OR_RETURN(void* ptr, devices_[device]->pool->Allocate(bytes));
  absl::MutexLock lock(&mu_);
  const engine::BufferId id = next_buffer_id_++;
  buffers_[id] = BufferEntry{device, static_cast<char*>(ptr), bytes, std::nullopt};
  return id;
}

void CudaEngineImpl::Free(engine::BufferId buffer) {
  std::optional<BufferEntry> taken;
  {
    absl::MutexLock lock(&mu_);
    taken = TakeEntry(buffers_, buffer);
  }
  if (!taken) {
    GetLogger("cuda")->warn("Free of unknown buffer {}", buffer);
    return;
  }
  const BufferEntry& entry = *taken;
  if (entry.imported) {
    ReleaseImported(buffer, *entry.imported);
    return;
  }
  // Any stream (a peer copy issued on another device included) may still have
  // work queued that touches the buffer: fence every busy stream.
  std::vector<CudaEvent> fences;
  for (const StreamSlot& slot : streams_) {
    ScopedDevice guard(slot.device);
    if (cudaStreamQuery(slot.stream.get()) != cudaErrorNotReady) continue;
    absl::StatusOr<CudaEvent> fence = CudaEvent::Create(slot.device, /*timing=*/false);
    if (fence.ok() && cudaEventRecord(fence->get(), slot.stream.get()) == cudaSuccess) {
      fences.push_back(std::move(*fence));
    } else {
      // Without a fence the block would be reused too early: keep it until the
      // stream drains instead.
      cudaStreamSynchronize(slot.stream.get());
    }
  }
  cudaGetLastError();
  const absl::Status status = devices_[entry.device]->pool->FreeAfter(entry.ptr, std::move(fences));
  if (!status.ok()) GetLogger("cuda")->error("Free of buffer {}: {}", buffer, status.ToString());
}

absl::StatusOr<engine::EventId> CudaEngineImpl::CreateEvent(int device) {
  if (!ValidDevice(device)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown device ", device));
  }
  ASSIGN_OR_RETURN(CudaEvent event, CudaEvent::Create(device, /*timing=*/true));
  absl::MutexLock lock(&mu_);
  const engine::EventId id = next_event_id_++;
  events_[id] = EventEntry{device, std::make_shared<CudaEvent>(std::move(event)), false};
  return id;
}

void CudaEngineImpl::DestroyEvent(engine::EventId event) {
  std::optional<EventEntry> taken;
  {
    absl::MutexLock lock(&mu_);
    taken = TakeEntry(events_, event);
  }
  // Released here, outside the lock. cudaEventDestroy on a pending event is
  // fine: it is released once complete.
}

absl::Status CudaEngineImpl::RecordEvent(engine::EventId event, engine::StreamId stream) {
  ASSIGN_OR_RETURN(const StreamSlot* slot, LookupStream(stream));
  ASSIGN_OR_RETURN(EventEntry entry, LookupEvent(event));
  if (entry.device != slot->device) {
    return absl::InvalidArgumentError(absl::StrCat("event ", event, " of device ", entry.device,
                                                   " recorded on stream ", stream, " of device ",
                                                   slot->device));
  }
  ScopedDevice guard(slot->device);
  RETURN_IF_ERROR(guard.status());
  CUDA_RETURN_IF_ERROR(cudaEventRecord(entry.event->get(), slot->stream.get()));
  absl::MutexLock lock(&mu_);
  auto it = events_.find(event);
  if (it != events_.end()) it->second.recorded = true;
  return absl::OkStatus();
}

absl::Status CudaEngineImpl::WaitEvent(engine::StreamId stream, engine::EventId event) {
  ASSIGN_OR_RETURN(const StreamSlot* slot, LookupStream(stream));
  ASSIGN_OR_RETURN(EventEntry entry, LookupEvent(event));
  if (!entry.recorded) return absl::OkStatus();  // CUDA agrees, but skip the call
  ScopedDevice guard(slot->device);
  RETURN_IF_ERROR(guard.status());
  // Works across devices: the stream waits for another GPU's event.
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(slot->stream.get(), entry.event->get(), 0));
  return absl::OkStatus();
}

absl::StatusOr<bool> CudaEngineImpl::EventDone(engine::EventId event) {
  ASSIGN_OR_RETURN(EventEntry entry, LookupEvent(event));
  if (!entry.recorded) return true;
  const cudaError_t query = cudaEventQuery(entry.event->get());
  if (query == cudaErrorNotReady) return false;
  CUDA_RETURN_IF_ERROR(query);
  return true;
}

absl::StatusOr<double> CudaEngineImpl::ElapsedMs(engine::EventId start, engine::EventId end) {
  ASSIGN_OR_RETURN(EventEntry first, LookupEvent(start));
  ASSIGN_OR_RETURN(EventEntry second, LookupEvent(end));
  if (first.device != second.device) {
    return absl::InvalidArgumentError(absl::StrCat("events ", start, " and ", end,
                                                   " are on devices ", first.device, " and ",
                                                   second.device, ": no common clock"));
  }
  if (!first.recorded || !second.recorded) {
    return absl::InvalidArgumentError(
        absl::StrCat("event ", first.recorded ? end : start, " was never recorded"));
  }
  ScopedDevice guard(first.device);
  RETURN_IF_ERROR(guard.status());
  for (const EventEntry* entry : {&first, &second}) {
    const cudaError_t query = cudaEventQuery(entry->event->get());
    if (query == cudaErrorNotReady) {
      return absl::FailedPreconditionError(
          absl::StrCat("event ", entry == &first ? start : end,
                       " has not completed yet: Synchronize the device first"));
    }
    CUDA_RETURN_IF_ERROR(query);
  }
  float ms = 0;
  CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, first.event->get(), second.event->get()));
  return static_cast<double>(ms);
}

absl::Status CudaEngineImpl::CopyToHost(void* dst, engine::BufferRef src, int device) {
  return HostCopy(src, device, /*to_host=*/true, dst);
}

absl::Status CudaEngineImpl::CopyFromHost(engine::BufferRef dst, int device, const void* src) {
  return HostCopy(dst, device, /*to_host=*/false, const_cast<void*>(src));
}

absl::Status CudaEngineImpl::HostCopy(const engine::BufferRef& ref, int device, bool to_host,
                                      void* host) {
  if (!ValidDevice(device)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown device ", device));
  }
  const char* op = to_host ? "CopyToHost" : "CopyFromHost";
  const char* device_side = to_host ? " source" : " destination";
  const char* host_side = to_host ? " destination" : " source";
  ASSIGN_OR_RETURN(char* ptr, Resolve(ref, device, absl::StrCat(op, device_side).c_str()));
  if (ref.bytes == 0) return absl::OkStatus();
  if (host == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, host_side, " is null"));
  }
  RETURN_IF_ERROR(WaitIdle({device}));
  ScopedDevice guard(device);
  RETURN_IF_ERROR(guard.status());
  // On an engine stream, then synchronised: a plain cudaMemcpy from pageable
  // memory may return before its DMA reaches the device.
  cudaStream_t stream = streams_[GetStream(device, engine::StreamRole::kComm, 0)].stream.get();
  void* to = to_host ? host : ptr;
  const void* from = to_host ? static_cast<const void*>(ptr) : host;
  const cudaMemcpyKind kind = to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(to, from, ref.bytes, kind, stream));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

}  // namespace overlap::cuda
