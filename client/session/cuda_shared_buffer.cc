#include "client/session/cuda_shared_buffer.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/session_ring.h"

namespace overlap::session {
namespace {

// The driver calls this file makes, reached through the runtime
// (cudaGetDriverEntryPointByVersion) so that nothing links libcuda.
struct Driver {
  PFN_cuMemCreate_v10020 MemCreate = nullptr;
  PFN_cuMemExportToShareableHandle_v10020 MemExportToShareableHandle = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 MemGetAllocationGranularity = nullptr;
  PFN_cuMemAddressReserve_v10020 MemAddressReserve = nullptr;
  PFN_cuMemAddressFree_v10020 MemAddressFree = nullptr;
  PFN_cuMemMap_v10020 MemMap = nullptr;
  PFN_cuMemUnmap_v10020 MemUnmap = nullptr;
  PFN_cuMemSetAccess_v10020 MemSetAccess = nullptr;
  PFN_cuMemRelease_v10020 MemRelease = nullptr;
  PFN_cuStreamWaitValue64_v11070 StreamWaitValue64 = nullptr;
  PFN_cuStreamWriteValue64_v11070 StreamWriteValue64 = nullptr;
};

template <typename Fn>
bool Load(const char* symbol, Fn* fn) {
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  void* address = nullptr;
  if (cudaGetDriverEntryPointByVersion(symbol, &address, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess || address == nullptr) {
    cudaGetLastError();
    return false;
  }
  *fn = reinterpret_cast<Fn>(address);
  return true;
}

absl::StatusOr<const Driver*> GetDriver() {
  static const Driver* const driver = [] {
    auto* d = new Driver;
    const bool ok = Load("cuMemCreate", &d->MemCreate) &&
                    Load("cuMemExportToShareableHandle", &d->MemExportToShareableHandle) &&
                    Load("cuMemGetAllocationGranularity", &d->MemGetAllocationGranularity) &&
                    Load("cuMemAddressReserve", &d->MemAddressReserve) &&
                    Load("cuMemAddressFree", &d->MemAddressFree) && Load("cuMemMap", &d->MemMap) &&
                    Load("cuMemUnmap", &d->MemUnmap) && Load("cuMemSetAccess", &d->MemSetAccess) &&
                    Load("cuMemRelease", &d->MemRelease) &&
                    Load("cuStreamWaitValue64", &d->StreamWaitValue64) &&
                    Load("cuStreamWriteValue64", &d->StreamWriteValue64);
    return ok ? d : nullptr;
  }();
  if (driver == nullptr) {
    return absl::UnavailableError(
        "the CUDA driver lacks the virtual memory or stream memory calls");
  }
  return driver;
}

absl::Status Check(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": CUresult ", static_cast<int>(result));
  if (result == CUDA_ERROR_OUT_OF_MEMORY) return absl::ResourceExhaustedError(message);
  return absl::UnavailableError(message);
}

absl::Status CudaStatus(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what, ": ", cudaGetErrorName(error)));
}

CUdeviceptr Word(const CudaSharedBuffer& signals, size_t offset) {
  return reinterpret_cast<CUdeviceptr>(signals.data()) + offset;
}

}  // namespace

absl::StatusOr<CudaSharedBuffer> CudaSharedBuffer::Create(int device, size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("a shared buffer of 0 bytes");
  if (absl::Status s = CudaStatus(cudaSetDevice(device), "cudaSetDevice"); !s.ok()) return s;
  // The primary context must exist before the driver's memory calls.
  if (absl::Status s = CudaStatus(cudaFree(nullptr), "cudaFree(0)"); !s.ok()) return s;
  absl::StatusOr<const Driver*> api = GetDriver();
  if (!api.ok()) return api.status();
  const Driver& cu = **api;

  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  if (absl::Status st = Check(
          cu.MemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
          "cuMemGetAllocationGranularity");
      !st.ok())
    return st;
  if (bytes > SIZE_MAX - granularity) return absl::InvalidArgumentError("buffer too large");
  CudaSharedBuffer buffer;
  buffer.size_ = (bytes + granularity - 1) / granularity * granularity;
  CUmemGenericAllocationHandle handle = 0;
  if (absl::Status st = Check(cu.MemCreate(&handle, buffer.size_, &prop, 0), "cuMemCreate");
      !st.ok())
    return st;
  buffer.handle_ = handle;
  int fd = -1;
  if (absl::Status st = Check(
          cu.MemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
          "cuMemExportToShareableHandle");
      !st.ok())
    return st;
  buffer.fd_ = OwnedFd(fd);
  CUdeviceptr ptr = 0;
  if (absl::Status st =
          Check(cu.MemAddressReserve(&ptr, buffer.size_, 0, 0, 0), "cuMemAddressReserve");
      !st.ok())
    return st;
  buffer.ptr_ = ptr;
  if (absl::Status st = Check(cu.MemMap(ptr, buffer.size_, 0, handle, 0), "cuMemMap"); !st.ok())
    return st;
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (absl::Status st = Check(cu.MemSetAccess(ptr, buffer.size_, &access, 1), "cuMemSetAccess");
      !st.ok())
    return st;
  return buffer;
}

CudaSharedBuffer::CudaSharedBuffer(CudaSharedBuffer&& other) noexcept
    : fd_(std::move(other.fd_)),
      handle_(std::exchange(other.handle_, 0)),
      ptr_(std::exchange(other.ptr_, 0)),
      size_(std::exchange(other.size_, 0)) {}

CudaSharedBuffer& CudaSharedBuffer::operator=(CudaSharedBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = std::move(other.fd_);
    handle_ = std::exchange(other.handle_, 0);
    ptr_ = std::exchange(other.ptr_, 0);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

CudaSharedBuffer::~CudaSharedBuffer() { Reset(); }

void CudaSharedBuffer::Reset() {
  absl::StatusOr<const Driver*> api = GetDriver();
  if (!api.ok()) return;
  // A failed unmap leaves the reservation: nothing better to do in a destructor.
  if (ptr_ != 0) {
    (*api)->MemUnmap(static_cast<CUdeviceptr>(ptr_), size_);
    (*api)->MemAddressFree(static_cast<CUdeviceptr>(ptr_), size_);
  }
  if (handle_ != 0) (*api)->MemRelease(static_cast<CUmemGenericAllocationHandle>(handle_));
  ptr_ = 0;
  handle_ = 0;
  size_ = 0;
  fd_ = OwnedFd();
}

absl::StatusOr<int> CudaDeviceForBusId(const std::string& bus_id) {
  int device = -1;
  if (cudaDeviceGetByPCIBusId(&device, bus_id.c_str()) != cudaSuccess) {
    cudaGetLastError();
    return absl::NotFoundError(absl::StrCat("no CUDA device here has PCI bus id ", bus_id));
  }
  return device;
}

absl::Status SignalInputsReady(void* stream, const CudaSharedBuffer& signals, uint64_t seq) {
  absl::StatusOr<const Driver*> api = GetDriver();
  if (!api.ok()) return api.status();
  if (absl::Status st = Check((*api)->StreamWriteValue64(static_cast<CUstream>(stream),
                                                         Word(signals, kSignalInputsReadyOffset),
                                                         seq, CU_STREAM_WRITE_VALUE_DEFAULT),
                              "cuStreamWriteValue64");
      !st.ok())
    return st;
  return absl::OkStatus();
}

absl::Status WaitOutputsReady(void* stream, const CudaSharedBuffer& signals, uint64_t seq) {
  absl::StatusOr<const Driver*> api = GetDriver();
  if (!api.ok()) return api.status();
  if (absl::Status st = Check((*api)->StreamWaitValue64(static_cast<CUstream>(stream),
                                                        Word(signals, kSignalOutputsReadyOffset),
                                                        seq, CU_STREAM_WAIT_VALUE_GEQ),
                              "cuStreamWaitValue64");
      !st.ok())
    return st;
  return absl::OkStatus();
}

}  // namespace overlap::session
