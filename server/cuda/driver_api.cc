#include "server/cuda/driver_api.h"

#include <cuda_runtime_api.h>

#include <atomic>

#include "absl/strings/str_cat.h"

namespace overlap::cuda {
namespace {

// The driver API version the signatures in DriverApi are of.
constexpr unsigned int kDriverApiVersion = 12000;

std::atomic<LostContextHook> lost_context_hook{nullptr};

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

// The results after which the context is lost, as for the runtime's sticky
// errors (cuda_check.h).
bool LostContext(CUresult result) {
  constexpr CUresult kLost[] = {CUDA_ERROR_ILLEGAL_ADDRESS,     CUDA_ERROR_LAUNCH_FAILED,
                                CUDA_ERROR_ECC_UNCORRECTABLE,   CUDA_ERROR_HARDWARE_STACK_ERROR,
                                CUDA_ERROR_ILLEGAL_INSTRUCTION, CUDA_ERROR_MISALIGNED_ADDRESS,
                                CUDA_ERROR_CONTEXT_IS_DESTROYED};
  for (CUresult lost : kLost) {
    if (result == lost) return true;
  }
  return false;
}

// Every other result's code; UNAVAILABLE where none is listed.
absl::StatusCode CodeOf(CUresult result) {
  struct Row {
    CUresult result;
    absl::StatusCode code;
  };
  constexpr Row kCodes[] = {
      {CUDA_ERROR_OUT_OF_MEMORY, absl::StatusCode::kResourceExhausted},
      {CUDA_ERROR_INVALID_VALUE, absl::StatusCode::kInvalidArgument},
      {CUDA_ERROR_INVALID_HANDLE, absl::StatusCode::kInvalidArgument},
      {CUDA_ERROR_INVALID_DEVICE, absl::StatusCode::kInvalidArgument},
      {CUDA_ERROR_NOT_SUPPORTED, absl::StatusCode::kFailedPrecondition},
      {CUDA_ERROR_NOT_PERMITTED, absl::StatusCode::kFailedPrecondition},
  };
  for (const Row& row : kCodes) {
    if (row.result == result) return row.code;
  }
  return absl::StatusCode::kUnavailable;
}

const char* BaseName(const char* file) {
  const char* base = file;
  for (const char* p = file; *p != '\0'; ++p) {
    if (*p == '/') base = p + 1;
  }
  return base;
}

}  // namespace

absl::StatusOr<const DriverApi*> Driver() {
  static const auto* const api = new absl::StatusOr<DriverApi>(LoadAll());
  if (!api->ok()) return api->status();
  return &**api;
}

void SetLostContextHook(LostContextHook hook) { lost_context_hook.store(hook); }

absl::Status CuResultToStatus(CUresult result, const char* expr, const char* file, int line) {
  const char* name = nullptr;
  absl::StatusOr<const DriverApi*> api = Driver();
  if (api.ok() && (*api)->GetErrorName(result, &name) != CUDA_SUCCESS) name = nullptr;
  const std::string message =
      absl::StrCat(BaseName(file), ":", line, ": ", expr, ": ",
                   name != nullptr ? name : absl::StrCat("CUresult ", static_cast<int>(result)));
  if (LostContext(result)) {
    if (LostContextHook hook = lost_context_hook.load(); hook != nullptr) hook();
    return absl::UnavailableError(absl::StrCat("device lost (sticky CUDA error): ", message));
  }
  return absl::Status(CodeOf(result), message);
}

absl::Status StreamWaitAtLeast(CUstream stream, CUdeviceptr word, uint64_t value) {
  absl::StatusOr<const DriverApi*> cu = Driver();
  if (!cu.ok()) return cu.status();
  CU_RETURN_IF_ERROR((*cu)->StreamWaitValue64(stream, word, value, CU_STREAM_WAIT_VALUE_GEQ));
  return absl::OkStatus();
}

absl::Status StreamWriteWord(CUstream stream, CUdeviceptr word, uint64_t value) {
  absl::StatusOr<const DriverApi*> cu = Driver();
  if (!cu.ok()) return cu.status();
  // The default flags fence first: the stream's earlier writes are visible
  // system-wide before the word is.
  CU_RETURN_IF_ERROR((*cu)->StreamWriteValue64(stream, word, value, CU_STREAM_WRITE_VALUE_DEFAULT));
  return absl::OkStatus();
}

}  // namespace overlap::cuda
