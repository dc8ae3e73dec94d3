// The CUDA engine's SharedMemory (server/engine/shared_memory.h): another
// process's cuMemCreate allocation, exported as a POSIX file descriptor,
// mapped on one of our GPUs as a buffer; and signal words in such memory
// written and waited for by stream memory operations (cuStreamWriteValue64 /
// cuStreamWaitValue64), so that no host thread waits for either process's GPU.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/cuda/cuda_check.h"
#include "server/cuda/cuda_engine_impl.h"
#include "server/cuda/driver_api.h"
#include "server/cuda/scoped_device.h"

namespace overlap::cuda {
namespace {

// Undoes the steps of an import made so far when a later one fails.
struct ImportCleanup {
  const DriverApi* cu;
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr base = 0;
  size_t reserved = 0;
  size_t mapped_bytes = 0;
  bool armed = true;
  ~ImportCleanup() {
    if (!armed) return;
    if (mapped_bytes > 0) cu->MemUnmap(base, mapped_bytes);
    if (reserved > 0) cu->MemAddressFree(base, reserved);
    if (handle != 0) cu->MemRelease(handle);
  }
};

CUmemAccessDesc ReadWriteOn(int gpu) {
  CUmemAccessDesc desc = {};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = gpu;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return desc;
}

absl::Status CheckImportArgs(int fd, size_t offset, size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("ImportBuffer: 0 bytes to map");
  if (fd < 0) return absl::InvalidArgumentError(absl::StrCat("ImportBuffer: bad fd ", fd));
  if (bytes > SIZE_MAX - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("ImportBuffer: offset ", offset, " + ", bytes, " bytes overflows 64 bits"));
  }
  return absl::OkStatus();
}

// Imports `fd` into cleanup->handle and returns its properties; INVALID_ARGUMENT
// for an fd that is no CUDA allocation or one on another GPU than `gpu`.
absl::StatusOr<CUmemAllocationProp> ImportHandle(const DriverApi& cu, int fd, int device, int gpu,
                                                 ImportCleanup* cleanup) {
  // The driver duplicates what it keeps of the fd: the caller still owns it.
  const CUresult imported = cu.MemImportFromShareableHandle(
      &cleanup->handle, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (imported != CUDA_SUCCESS) {
    cleanup->handle = 0;
    const absl::Status status =
        CuResultToStatus(imported, "cuMemImportFromShareableHandle", __FILE__, __LINE__);
    return absl::InvalidArgumentError(absl::StrCat(
        "ImportBuffer: fd ", fd, " is not a CUDA shareable allocation (export one made by ",
        "cuMemCreate with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR): ", status.message()));
  }
  CUmemAllocationProp prop = {};
  CU_RETURN_IF_ERROR(cu.MemGetAllocationPropertiesFromHandle(&prop, cleanup->handle));
  if (prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop.location.id != gpu) {
    return absl::InvalidArgumentError(
        absl::StrCat("ImportBuffer: the allocation of fd ", fd, " lives on GPU ", prop.location.id,
                     " (location type ", static_cast<int>(prop.location.type), "), not on device ",
                     device, "'s GPU ", gpu));
  }
  return prop;
}

// Maps the whole imported allocation at a new reservation (cleanup->base) and
// returns the bytes mapped. cuMemMap maps a whole allocation (a prefix answers
// NOT_SUPPORTED), and an imported handle does not tell its size: reserve room
// for the largest one the GPU could hold (`device_total`), and try sizes from
// the granule above offset + bytes upward.
absl::StatusOr<size_t> MapWhole(const DriverApi& cu, const CUmemAllocationProp& prop, int fd,
                                size_t offset, size_t bytes, size_t device_total,
                                ImportCleanup* cleanup) {
  size_t granularity = 0;
  CU_RETURN_IF_ERROR(
      cu.MemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  if (granularity == 0) granularity = 1;
  const size_t end = offset + bytes;  // CheckImportArgs: no overflow
  if (end > SIZE_MAX - (granularity - 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ImportBuffer: offset ", offset, " + ", bytes, " bytes overflows 64 bits"));
  }
  const size_t needed = (end + granularity - 1) / granularity * granularity;
  const size_t limit = std::max(needed, device_total / granularity * granularity);
  CU_RETURN_IF_ERROR(cu.MemAddressReserve(&cleanup->base, limit, granularity, 0, 0));
  cleanup->reserved = limit;
  size_t size = needed;
  CUresult mapped = cu.MemMap(cleanup->base, size, 0, cleanup->handle, 0);
  while (mapped == CUDA_ERROR_NOT_SUPPORTED && size < limit) {
    size += granularity;
    mapped = cu.MemMap(cleanup->base, size, 0, cleanup->handle, 0);
  }
  if (mapped != CUDA_SUCCESS) {
    const absl::Status status = CuResultToStatus(mapped, "cuMemMap", __FILE__, __LINE__);
    if (mapped == CUDA_ERROR_INVALID_VALUE || mapped == CUDA_ERROR_NOT_SUPPORTED) {
      return absl::InvalidArgumentError(absl::StrCat("ImportBuffer: the allocation of fd ", fd,
                                                     " is smaller than offset ", offset, " + ",
                                                     bytes, " bytes: ", status.message()));
    }
    return status;
  }
  cleanup->mapped_bytes = size;
  return size;
}

// Read-write access for `gpus` (the first is the buffer's own); the first
// alone where the driver refuses the peers.
absl::Status GrantAccess(const DriverApi& cu, const ImportCleanup& cleanup,
                         const std::vector<int>& gpus, int device) {
  std::vector<CUmemAccessDesc> access;
  for (int gpu : gpus) access.push_back(ReadWriteOn(gpu));
  const size_t size = cleanup.mapped_bytes;
  if (cu.MemSetAccess(cleanup.base, size, access.data(), access.size()) != CUDA_SUCCESS) {
    if (access.size() > 1) {
      GetLogger("cuda")->warn("ImportBuffer: peers cannot reach an imported buffer of device {}",
                              device);
    }
    CU_RETURN_IF_ERROR(cu.MemSetAccess(cleanup.base, size, access.data(), 1));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<engine::BufferId> CudaEngineImpl::ImportBuffer(int device, int fd, size_t offset,
                                                              size_t bytes) {
  if (!ValidDevice(device)) {
    return absl::InvalidArgumentError(absl::StrCat("ImportBuffer: unknown device ", device));
  }
  RETURN_IF_ERROR(CheckImportArgs(fd, offset, bytes));
  ASSIGN_OR_RETURN(const DriverApi* cu, Driver());
  ScopedDevice guard(device);
  RETURN_IF_ERROR(guard.status());
  const int gpu = GpuOf(device);

  ImportCleanup cleanup{cu};
  ASSIGN_OR_RETURN(const CUmemAllocationProp prop, ImportHandle(*cu, fd, device, gpu, &cleanup));
  ASSIGN_OR_RETURN(const size_t size,
                   MapWhole(*cu, prop, fd, offset, bytes,
                            devices_[device]->pool->device_total_bytes(), &cleanup));
  // This GPU, and the GPUs that reach it over peer access (peer copies, GEMMs
  // storing into a peer).
  std::vector<int> gpus = {gpu};
  for (int other = 0; other < DeviceCount(); ++other) {
    const int other_gpu = GpuOf(other);
    if (peer_access_[other][device] &&
        std::find(gpus.begin(), gpus.end(), other_gpu) == gpus.end()) {
      gpus.push_back(other_gpu);
    }
  }
  RETURN_IF_ERROR(GrantAccess(*cu, cleanup, gpus, device));
  const ImportedMapping mapping{cleanup.handle, cleanup.base, size, cleanup.reserved};
  char* ptr = reinterpret_cast<char*>(static_cast<uintptr_t>(cleanup.base)) + offset;
  cleanup.armed = false;
  absl::MutexLock lock(&mu_);
  const engine::BufferId id = next_buffer_id_++;
  buffers_[id] = BufferEntry{device, ptr, bytes, mapping};
  return id;
}

void CudaEngineImpl::ReleaseImported(engine::BufferId buffer, const ImportedMapping& mapping) {
  // Unmapping memory a queued kernel still touches would fault it: wait for
  // every busy stream (imports are freed when a session ends, not per op).
  for (const StreamSlot& slot : streams_) {
    ScopedDevice guard(slot.device);
    if (cudaStreamQuery(slot.stream.get()) == cudaErrorNotReady) {
      const cudaError_t error = cudaStreamSynchronize(slot.stream.get());
      if (error != cudaSuccess) {
        GetLogger("cuda")->warn(
            "Free of imported buffer {}: {}", buffer,
            CudaErrorToStatus(error, "cudaStreamSynchronize", __FILE__, __LINE__).ToString());
      }
    }
  }
  cudaGetLastError();
  absl::StatusOr<const DriverApi*> cu = Driver();
  if (!cu.ok()) return;  // nothing was imported without it
  auto check = [&](CUresult result, const char* what) {
    if (result != CUDA_SUCCESS) {
      GetLogger("cuda")->error("Free of imported buffer {}: {}", buffer,
                               CuResultToStatus(result, what, __FILE__, __LINE__).ToString());
    }
  };
  check((*cu)->MemUnmap(mapping.base, mapping.size), "cuMemUnmap");
  check((*cu)->MemAddressFree(mapping.base, mapping.reserved), "cuMemAddressFree");
  check((*cu)->MemRelease(mapping.handle), "cuMemRelease");
}

absl::StatusOr<uint64_t> CudaEngineImpl::SignalWord(const StreamSlot& slot,
                                                    const engine::BufferRef& word,
                                                    const char* op) const {
  if (word.bytes != sizeof(uint64_t)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": a signal word is 8 bytes, got ", word.bytes));
  }
  // One look-up, and no string made unless it fails: this runs twice per
  // session command on the lanes' hot path.
  ASSIGN_OR_RETURN(const BufferEntry entry, LookupBuffer(word.buffer));
  char* ptr = entry.ptr + word.offset;
  if (entry.device != slot.device || word.offset > entry.bytes ||
      word.bytes > entry.bytes - word.offset) {
    ASSIGN_OR_RETURN(ptr, Resolve(word, slot.device, absl::StrCat(op, " word").c_str()));
  }
  if (!entry.imported) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": buffer ", word.buffer,
                     " was not imported (ImportBuffer): a signal word lives in "
                     "memory both processes map"));
  }
  const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  if (address % alignof(uint64_t) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": the word at offset ", word.offset,
                                                   " of buffer ", word.buffer,
                                                   " is not 8-byte aligned in memory"));
  }
  return static_cast<uint64_t>(address);
}

absl::Status CudaEngineImpl::OnSignalWord(engine::StreamId stream, const engine::BufferRef& word,
                                          const char* op, SignalOperation operation,
                                          uint64_t value) {
  ASSIGN_OR_RETURN(const StreamSlot* slot, LookupStream(stream));
  ASSIGN_OR_RETURN(const uint64_t address, SignalWord(*slot, word, op));
  ScopedDevice guard(slot->device);
  RETURN_IF_ERROR(guard.status());
  return operation(slot->stream.get(), static_cast<CUdeviceptr>(address), value);
}

absl::Status CudaEngineImpl::WaitValue(engine::StreamId stream, engine::BufferRef word,
                                       uint64_t value, absl::Time /*deadline*/) {
  // The deadline is not enforced: the GPU's front end holds the stream until
  // the word is written, and nothing here can fail it after a time. The
  // caller watches the word itself (shared_memory.h).
  return OnSignalWord(stream, word, "WaitValue", &StreamWaitAtLeast, value);
}

absl::Status CudaEngineImpl::WriteValue(engine::StreamId stream, engine::BufferRef word,
                                        uint64_t value) {
  return OnSignalWord(stream, word, "WriteValue", &StreamWriteWord, value);
}

}  // namespace overlap::cuda
