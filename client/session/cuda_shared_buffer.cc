#include "client/session/cuda_shared_buffer.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/session_ring.h"
#include "server/cuda/driver_api.h"

namespace overlap::session {
namespace {

using cuda::DriverApi;

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
  absl::StatusOr<const DriverApi*> api = cuda::Driver();
  if (!api.ok()) return api.status();
  const DriverApi& cu = **api;

  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  CU_RETURN_IF_ERROR(
      cu.MemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  if (bytes > SIZE_MAX - granularity) return absl::InvalidArgumentError("buffer too large");
  // Each step is kept in `buffer` as soon as it is made, so that its
  // destructor undoes them all on a later failure.
  CudaSharedBuffer buffer;
  buffer.size_ = (bytes + granularity - 1) / granularity * granularity;
  CUmemGenericAllocationHandle handle = 0;
  CU_RETURN_IF_ERROR(cu.MemCreate(&handle, buffer.size_, &prop, 0));
  buffer.handle_ = handle;
  int fd = -1;
  CU_RETURN_IF_ERROR(
      cu.MemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  buffer.fd_ = OwnedFd(fd);
  CUdeviceptr ptr = 0;
  CU_RETURN_IF_ERROR(cu.MemAddressReserve(&ptr, buffer.size_, 0, 0, 0));
  buffer.ptr_ = ptr;
  CU_RETURN_IF_ERROR(cu.MemMap(ptr, buffer.size_, 0, handle, 0));
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU_RETURN_IF_ERROR(cu.MemSetAccess(ptr, buffer.size_, &access, 1));
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
  absl::StatusOr<const DriverApi*> api = cuda::Driver();
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
  return cuda::StreamWriteWord(static_cast<CUstream>(stream),
                               Word(signals, kSignalInputsReadyOffset), seq);
}

absl::Status WaitOutputsReady(void* stream, const CudaSharedBuffer& signals, uint64_t seq) {
  return cuda::StreamWaitAtLeast(static_cast<CUstream>(stream),
                                 Word(signals, kSignalOutputsReadyOffset), seq);
}

}  // namespace overlap::session
