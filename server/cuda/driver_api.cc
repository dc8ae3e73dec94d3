#include "server/cuda/driver_api.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "server/cuda/cuda_check.h"

namespace overlap::cuda {
namespace {

// The driver API version the signatures in DriverApi are of.
constexpr unsigned int kDriverApiVersion = 12000;

template <typename Fn>
absl::Status Load(const char* symbol, Fn* fn) {
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  void* address = nullptr;
  const cudaError_t error = cudaGetDriverEntryPointByVersion(symbol, &address, kDriverApiVersion,
                                                             cudaEnableDefault, &found);
  if (error != cudaSuccess || found != cudaDriverEntryPointSuccess || address == nullptr) {
    cudaGetLastError();  // not sticky: clear it for whoever asks next
    return absl::UnavailableError(absl::StrCat("CUDA driver entry point ", symbol,
                                               " not found: ", cudaGetErrorName(error),
                                               " (query result ", static_cast<int>(found), ")"));
  }
  *fn = reinterpret_cast<Fn>(address);
  return absl::OkStatus();
}

absl::StatusOr<DriverApi> LoadAll() {
  DriverApi api;
  const absl::Status loaded[] = {
      Load("cuGetErrorName", &api.GetErrorName),
      Load("cuMemCreate", &api.MemCreate),
      Load("cuMemExportToShareableHandle", &api.MemExportToShareableHandle),
      Load("cuMemImportFromShareableHandle", &api.MemImportFromShareableHandle),
      Load("cuMemGetAllocationPropertiesFromHandle", &api.MemGetAllocationPropertiesFromHandle),
      Load("cuMemGetAllocationGranularity", &api.MemGetAllocationGranularity),
      Load("cuMemAddressReserve", &api.MemAddressReserve),
      Load("cuMemAddressFree", &api.MemAddressFree),
      Load("cuMemMap", &api.MemMap),
      Load("cuMemUnmap", &api.MemUnmap),
      Load("cuMemSetAccess", &api.MemSetAccess),
      Load("cuMemRelease", &api.MemRelease),
      Load("cuStreamWaitValue64", &api.StreamWaitValue64),
      Load("cuStreamWriteValue64", &api.StreamWriteValue64),
  };
  for (const absl::Status& status : loaded) {
    if (!status.ok()) return status;
  }
  return api;
}

}  // namespace

absl::StatusOr<const DriverApi*> Driver() {
  static const auto* const api = new absl::StatusOr<DriverApi>(LoadAll());
  if (!api->ok()) return api->status();
  return &**api;
}

absl::Status CuResultToStatus(CUresult result, const char* expr, const char* file, int line) {
  const char* name = nullptr;
  absl::StatusOr<const DriverApi*> api = Driver();
  if (api.ok() && (*api)->GetErrorName(result, &name) != CUDA_SUCCESS) name = nullptr;
  const char* base = file;
  for (const char* p = file; *p != '\0'; ++p) {
    if (*p == '/') base = p + 1;
  }
  const std::string message =
      absl::StrCat(base, ":", line, ": ", expr, ": ",
                   name != nullptr ? name : absl::StrCat("CUresult ", static_cast<int>(result)));
  switch (result) {
    // The context is lost, as for the runtime's sticky errors (cuda_check.h).
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
      MarkStickyErrorSeen();
      return absl::UnavailableError(absl::StrCat("device lost (sticky CUDA error): ", message));
    case CUDA_ERROR_OUT_OF_MEMORY:
      return absl::ResourceExhaustedError(message);
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_DEVICE:
      return absl::InvalidArgumentError(message);
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_NOT_PERMITTED:
      return absl::FailedPreconditionError(message);
    default:
      return absl::UnavailableError(message);
  }
}

}  // namespace overlap::cuda
