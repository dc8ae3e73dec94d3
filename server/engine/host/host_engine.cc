#include "server/engine/host/host_engine.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/engine/host/host_engine_impl.h"
#include "server/engine/host/host_kernels.h"

namespace overlap::engine {

absl::StatusOr<std::unique_ptr<Engine>> CreateHostEngine(const HostEngineOptions& options) {
  return host::HostEngine::Create(options);
}

namespace host {
namespace {

const std::set<std::string>& InjectableOps() {
  static const auto* ops = new std::set<std::string>{
      "allocate",   "fill_random",    "fill_constant", "gemm",      "accumulate",
      "all_gather", "reduce_scatter", "all_reduce",    "send_recv", "peer_copy",
      "barrier",    "copy_to_host",   "copy_from_host"};
  return *ops;
}

absl::Status InjectedStatus(const std::string& op, int call) {
  const std::string what = absl::StrCat(op, " call #", call);
  if (op == "allocate") {
    return absl::ResourceExhaustedError(absl::StrCat("injected allocation failure: ", what));
  }
  if (op == "gemm") {
    return absl::InternalError(
        absl::StrCat("injected cuBLAS failure: ", what, " (CUBLAS_STATUS_EXECUTION_FAILED)"));
  }
  if (op == "all_gather" || op == "reduce_scatter" || op == "all_reduce" || op == "send_recv" ||
      op == "barrier") {
    return absl::AbortedError(
        absl::StrCat("injected NCCL failure: ", what, " (ncclRemoteError, communicator aborted)"));
  }
  return absl::UnavailableError(
      absl::StrCat("injected CUDA failure: ", what, " (cudaErrorIllegalAddress)"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> HostEngine::Create(const HostEngineOptions& options) {
  if (options.device_count < 1 || options.device_count > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("device_count must be in [1, 64], got ", options.device_count));
  }
  if (options.device_memory_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device_memory_bytes must be positive, got ", options.device_memory_bytes));
  }
  if (options.streams_per_role < 1 || options.streams_per_role > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("streams_per_role must be in [1, 16], got ", options.streams_per_role));
  }
  if (!options.fail_op.empty() && !InjectableOps().count(options.fail_op)) {
    return absl::InvalidArgumentError(
        absl::StrCat("fail_op \"", options.fail_op, "\" is not an injectable op"));
  }
  if (options.fail_after < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("fail_after must be >= 0, got ", options.fail_after));
  }
  InitBlas();
  return std::unique_ptr<Engine>(new HostEngine(options));
}

HostEngine::HostEngine(const HostEngineOptions& options)
    : options_(options),
      gate_(std::make_shared<LaunchGate>(options.device_count)),
      memory_in_use_(options.device_count, 0),
      errors_(options.device_count) {
  const int spr = options.streams_per_role;
  std::vector<std::string> names;
  for (int d = 0; d < options.device_count; ++d) {
    // The critical lane (comm) runs ahead of the deferred lane on its device.
    auto gate = std::make_shared<PriorityGate>();
    for (const char* role : {"comm", "compute", "deferred"}) {
      const WorkerPriority priority = role == std::string("comm")       ? WorkerPriority::kHigh
                                      : role == std::string("deferred") ? WorkerPriority::kLow
                                                                        : WorkerPriority::kNormal;
      for (int i = 0; i < spr; ++i) {
        Stream stream;
        stream.device = d;
        stream.name = absl::StrCat(role, i, "@dev", d);
        stream.worker = std::make_unique<StreamWorker>(stream.name, gate, priority);
        names.push_back(stream.name);
        streams_.push_back(std::move(stream));
      }
    }
  }
  if (options.hazard_checks) hazards_ = std::make_unique<HazardTracker>(std::move(names));
}

HostEngine::~HostEngine() {
  // Each worker runs what is queued, then joins; collectives complete because
  // every rank's part was queued together.
  for (Stream& stream : streams_) stream.worker->WaitIdle();
  streams_.clear();
}

DeviceInfo HostEngine::GetDeviceInfo(int device) const {
  DeviceInfo info;
  info.index = device;
  if (device < 0 || device >= options_.device_count) return info;
  info.name = absl::StrCat("host-rank-", device);
  info.memory_bytes = options_.device_memory_bytes;
  info.total_memory_bytes = options_.device_memory_bytes;  // a simulated device is all pool
  info.pci_bus_id = absl::StrCat("host:", device);
  info.model_name = info.name;
  return info;
}

DeviceTelemetry HostEngine::Telemetry(int device) const {
  DeviceTelemetry t;
  if (absl::StatusOr<double> joules = EnergyJoules(device); joules.ok()) {
    t.energy_valid = true;
    t.energy_j = *joules;
  }
  if (options_.sick_device < 0 || device < 0 || device >= options_.device_count) return t;
  t.pcie_valid = true;
  t.pcie_gen = t.pcie_max_gen = 5;
  t.pcie_width = t.pcie_max_width = 16;
  t.ecc_valid = true;
  t.row_remap_valid = true;
  if (device == options_.sick_device) {
    t.pcie_width = 8;
    t.ecc_uncorrected = 2;
  }
  return t;
}

absl::StatusOr<double> HostEngine::EnergyJoules(int device) const {
  if (device < 0 || device >= options_.device_count) {
    return absl::InvalidArgumentError(absl::StrCat("no device ", device));
  }
  if (options_.energy_counter) return options_.energy_counter(device);
  if (options_.simulated_power_w <= 0) {
    return absl::UnimplementedError("host backend: no energy counter (simulated_power_w is 0)");
  }
  return options_.simulated_power_w * absl::ToDoubleSeconds(absl::Now() - created_);
}

BackendVersions HostEngine::Versions() const { return BackendVersions{"n/a", "n/a", "n/a", "n/a"}; }

absl::StatusOr<int64_t> HostEngine::ForgetXids(int device) const {
  return absl::FailedPreconditionError("host backend counts no Xid errors (NVML does)");
}

absl::StatusOr<int64_t> HostEngine::FirstNonFinite(BufferRef src, DType dtype, int device) {
  return FirstNonFiniteOnHost(*this, src, dtype, device);
}

int64_t HostEngine::MemoryInUse(int device) const {
  absl::MutexLock lock(&mu_);
  if (device < 0 || device >= options_.device_count) return 0;
  return memory_in_use_[device];
}

StreamId HostEngine::GetStream(int device, StreamRole role, int index) {
  if (device < 0 || device >= options_.device_count || index < 0 ||
      index >= options_.streams_per_role) {
    return -1;
  }
  const int role_index = role == StreamRole::kComm ? 0 : role == StreamRole::kCompute ? 1 : 2;
  return (device * kRoles + role_index) * options_.streams_per_role + index;
}

absl::Status HostEngine::CheckDevice(int device, absl::string_view what) const {
  if (device < 0 || device >= options_.device_count) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": device ", device, " does not exist (devices 0..", options_.device_count - 1, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<const HostEngine::Stream*> HostEngine::FindStream(StreamId stream,
                                                                 absl::string_view what) const {
  if (stream < 0 || stream >= static_cast<StreamId>(streams_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": unknown stream ", stream));
  }
  return &streams_[stream];
}

absl::StatusOr<HostEngine::Range> HostEngine::Resolve(const BufferRef& ref, int device,
                                                      absl::string_view what) const {
  auto it = buffers_.find(ref.buffer);
  if (it == buffers_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": unknown buffer ", ref.buffer));
  }
  const Buffer& buffer = it->second;
  if (buffer.device != device) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": buffer ", ref.buffer, " is on device ",
                                                   buffer.device, ", expected device ", device));
  }
  if (ref.offset > buffer.bytes || ref.bytes > buffer.bytes - ref.offset) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": range [", ref.offset, ", ",
                                                   ref.offset + ref.bytes, ") is outside buffer ",
                                                   ref.buffer, " of ", buffer.bytes, " bytes"));
  }
  return Range{ref.buffer, buffer.storage, ref.offset, ref.bytes};
}

absl::StatusOr<HostEngine::Range> HostEngine::ResolveTyped(const BufferRef& ref, int device,
                                                           DType dtype,
                                                           absl::string_view what) const {
  const size_t es = DTypeSize(dtype);
  if (ref.offset % es != 0 || ref.bytes % es != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": offset ", ref.offset, " and size ",
                                                   ref.bytes, " must be multiples of the ",
                                                   DTypeName(dtype), " element size ", es));
  }
  return Resolve(ref, device, what);
}

std::vector<StreamId> HostEngine::DeviceStreams(absl::Span<const int> devices) const {
  std::vector<StreamId> ids;
  const int per_device = kRoles * options_.streams_per_role;
  for (int d : devices) {
    for (int i = 0; i < per_device; ++i) ids.push_back(d * per_device + i);
  }
  return ids;
}

bool HostEngine::PassFailurePoint(const char* op, absl::Span<const StreamId> streams,
                                  absl::Status* result) {
  if (!sticky_.ok()) {
    *result = sticky_;
    return false;
  }
  if (options_.fail_op != op) return true;
  const int call = call_counts_[op]++;
  if (call != options_.fail_after) return true;
  const absl::Status injected = InjectedStatus(op, call);
  GetLogger("engine")->warn("host engine: {}", injected.ToString());
  if (options_.inject_sticky_error) {
    sticky_ = injected;
    healthy_ = false;
  }
  if (options_.fail_async && !streams.empty()) {
    for (StreamId s : streams) {
      const int device = streams_[s].device;
      streams_[s].worker->Enqueue([this, device, injected] { RecordError(device, injected); });
    }
    *result = absl::OkStatus();
    return false;
  }
  for (StreamId s : streams) RecordError(streams_[s].device, injected);
  *result = injected;
  return false;
}

absl::Status HostEngine::CheckHazards(absl::Span<const StreamId> streams,
                                      absl::Span<const Access> accesses, const char* op) {
  if (hazards_ == nullptr) return absl::OkStatus();
  std::vector<int> ids(streams.begin(), streams.end());
  absl::Status status = hazards_->Op(ids, accesses, op);
  if (!status.ok()) {
    for (StreamId s : streams) {
      if (s != hazards_->host()) RecordError(streams_[s].device, status);
    }
  }
  return status;
}

void HostEngine::RecordError(int device, const absl::Status& status) {
  absl::MutexLock lock(&errors_mu_);
  DeviceError& error = errors_[device];
  if (error.status.ok()) error = DeviceError{status, ++error_sequence_};
}

void HostEngine::WaitIdle(absl::Span<const int> devices) {
  for (StreamId s : DeviceStreams(devices)) streams_[s].worker->WaitIdle();
}

absl::StatusOr<BufferId> HostEngine::Allocate(int device, size_t bytes) {
  RETURN_IF_ERROR(CheckDevice(device, "Allocate"));
  absl::MutexLock lock(&mu_);
  absl::Status result;
  if (!PassFailurePoint("allocate", {}, &result)) return result;
  const int64_t capacity = options_.device_memory_bytes;
  const int64_t free_bytes = capacity - memory_in_use_[device];
  if (bytes > static_cast<uint64_t>(free_bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("device ", device, " (host-rank-", device, "): cannot allocate ", bytes,
                     " bytes: ", free_bytes, " of ", capacity, " bytes free"));
  }
  auto storage = std::make_shared<Storage>();
  storage->data.reset(new (std::nothrow) uint8_t[std::max<size_t>(bytes, 1)]);
  if (storage->data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("device ", device, ": host allocation of ", bytes, " bytes failed"));
  }
  // NaN in every dtype: reading memory nobody wrote shows up in the results.
  if (hazards_ != nullptr) std::memset(storage->data.get(), 0xFF, bytes);
  const BufferId id = next_buffer_++;
  buffers_[id] = Buffer{device, bytes, std::move(storage), /*imported=*/false};
  memory_in_use_[device] += static_cast<int64_t>(bytes);
  return id;
}

void HostEngine::Free(BufferId buffer) {
  int device;
  {
    absl::MutexLock lock(&mu_);
    auto it = buffers_.find(buffer);
    if (it == buffers_.end()) {
      GetLogger("engine")->warn("host engine: Free of unknown buffer {}", buffer);
      return;
    }
    device = it->second.device;
  }
  // As if after Synchronize(device): work on the device's streams is done (and
  // other devices' queued work keeps the storage alive until it finishes).
  WaitIdle({device});
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(buffer);
  if (it == buffers_.end()) return;
  if (!it->second.imported) memory_in_use_[device] -= static_cast<int64_t>(it->second.bytes);
  // An imported buffer's mapping goes with the last task that holds its storage.
  buffers_.erase(it);
  if (hazards_ != nullptr) {
    hazards_->SyncHost(DeviceStreams({device}));
    hazards_->ForgetBuffer(buffer);
  }
}

absl::StatusOr<EventId> HostEngine::CreateEvent(int device) {
  RETURN_IF_ERROR(CheckDevice(device, "CreateEvent"));
  absl::MutexLock lock(&mu_);
  const EventId id = next_event_++;
  events_[id] = Event{device, nullptr, {}};
  return id;
}

absl::StatusOr<HostEngine::Event*> HostEngine::FindEvent(EventId event, absl::string_view what) {
  auto it = events_.find(event);
  if (it == events_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": unknown event ", event));
  }
  return &it->second;
}

void HostEngine::DestroyEvent(EventId event) {
  absl::MutexLock lock(&mu_);
  events_.erase(event);
}

absl::Status HostEngine::RecordEvent(EventId event, StreamId stream) {
  ASSIGN_OR_RETURN(const Stream* s, FindStream(stream, "RecordEvent"));
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Event * e, FindEvent(event, "RecordEvent"));
  if (e->device != s->device) {
    return absl::InvalidArgumentError(absl::StrCat("RecordEvent: event ", event, " is on device ",
                                                   e->device, " but stream ", s->name,
                                                   " is on device ", s->device));
  }
  auto record = std::make_shared<EventRecord>();
  e->latest = record;
  if (hazards_ != nullptr) e->snapshot = hazards_->Snapshot(stream);
  s->worker->Enqueue([record] { record->Complete(); });
  return absl::OkStatus();
}

absl::Status HostEngine::WaitEvent(StreamId stream, EventId event) {
  ASSIGN_OR_RETURN(const Stream* s, FindStream(stream, "WaitEvent"));
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(const Event* e, FindEvent(event, "WaitEvent"));
  std::shared_ptr<EventRecord> record = e->latest;
  if (record == nullptr) return absl::OkStatus();  // never recorded: CUDA makes it a no-op
  if (hazards_ != nullptr) hazards_->Merge(stream, e->snapshot);
  s->worker->Enqueue([record] { record->Wait(); });
  return absl::OkStatus();
}

absl::StatusOr<bool> HostEngine::EventDone(EventId event) {
  std::shared_ptr<EventRecord> record;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(const Event* e, FindEvent(event, "EventDone"));
    record = e->latest;
  }
  return record == nullptr || record->done();
}

absl::StatusOr<double> HostEngine::ElapsedMs(EventId start, EventId end) {
  std::shared_ptr<EventRecord> records[2];
  {
    absl::MutexLock lock(&mu_);
    int devices[2];
    const EventId ids[2] = {start, end};
    for (int i = 0; i < 2; ++i) {
      ASSIGN_OR_RETURN(const Event* e, FindEvent(ids[i], "ElapsedMs"));
      if (e->latest == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("ElapsedMs: event ", ids[i], " was never recorded"));
      }
      devices[i] = e->device;
      records[i] = e->latest;
    }
    if (devices[0] != devices[1]) {
      return absl::InvalidArgumentError(absl::StrCat("ElapsedMs: events ", start, " and ", end,
                                                     " are on devices ", devices[0], " and ",
                                                     devices[1]));
    }
  }
  for (const auto& record : records) {
    if (!record->done()) {
      return absl::FailedPreconditionError(
          "ElapsedMs: an event has not completed yet (call Synchronize first)");
    }
  }
  return std::chrono::duration<double, std::milli>(records[1]->time() - records[0]->time()).count();
}

absl::Status HostEngine::Synchronize(const std::vector<int>& devices) {
  for (int d : devices) RETURN_IF_ERROR(CheckDevice(d, "Synchronize"));
  WaitIdle(devices);
  {
    absl::MutexLock lock(&mu_);
    if (hazards_ != nullptr) hazards_->SyncHost(DeviceStreams(devices));
  }
  absl::MutexLock lock(&errors_mu_);
  absl::Status first;
  uint64_t first_sequence = 0;
  for (int d : devices) {
    DeviceError& error = errors_[d];
    if (!error.status.ok() && (first.ok() || error.sequence < first_sequence)) {
      first = error.status;
      first_sequence = error.sequence;
    }
    error = DeviceError{};
  }
  return first;
}

absl::Status HostEngine::CopyToHost(void* dst, BufferRef src, int device) {
  return HostCopy(src, device, /*to_host=*/true, dst);
}

absl::Status HostEngine::CopyFromHost(BufferRef dst, int device, const void* src) {
  return HostCopy(dst, device, /*to_host=*/false, const_cast<void*>(src));
}

absl::Status HostEngine::HostCopy(BufferRef ref, int device, bool to_host, void* host) {
  const char* op = to_host ? "copy_to_host" : "copy_from_host";
  RETURN_IF_ERROR(CheckDevice(device, op));
  if (host == nullptr && ref.bytes > 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": null host pointer"));
  }
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(Resolve(ref, device, op).status());
  }
  WaitIdle({device});
  Range range;
  {
    absl::MutexLock lock(&mu_);
    // Re-resolve: the buffer could only have gone away through a misuse of the
    // threading contract, but a clean error beats a dangling pointer.
    ASSIGN_OR_RETURN(range, Resolve(ref, device, op));
    absl::Status result;
    if (!PassFailurePoint(op, {}, &result)) return result;
    if (hazards_ != nullptr) {
      hazards_->SyncHost(DeviceStreams({device}));
      const Access access{ref.buffer, Region::Contiguous(ref.offset, ref.bytes), !to_host,
                          hazards_->host()};
      absl::Status status = hazards_->Op({hazards_->host()}, {access}, op);
      if (!status.ok()) {
        RecordError(device, status);
        return status;
      }
    }
  }
  if (to_host) {
    std::memcpy(host, range.data(), range.bytes);
  } else {
    std::memcpy(range.data(), host, range.bytes);
  }
  return absl::OkStatus();
}

}  // namespace host
}  // namespace overlap::engine
