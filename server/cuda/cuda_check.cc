#include "server/cuda/cuda_check.h"

#include <atomic>

#include "absl/strings/str_cat.h"

namespace overlap::cuda {
namespace {

std::atomic<bool> sticky_error_seen{false};

const char* BaseName(const char* file) {
  const char* base = file;
  for (const char* p = file; *p != '\0'; ++p) {
    if (*p == '/') base = p + 1;
  }
  return base;
}

std::string Where(const char* expr, const char* file, int line) {
  return absl::StrCat(BaseName(file), ":", line, ": ", expr);
}

const char* NcclResultName(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "ncclUnknownResult";
  }
}

}  // namespace

bool IsStickyCudaError(cudaError_t error) {
  switch (error) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorECCUncorrectable:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorContextIsDestroyed:
      return true;
    default:
      return false;
  }
}

bool StickyErrorSeen() { return sticky_error_seen.load(std::memory_order_relaxed); }
void MarkStickyErrorSeen() { sticky_error_seen.store(true, std::memory_order_relaxed); }

absl::Status CudaErrorToStatus(cudaError_t error, const char* expr, const char* file, int line) {
  const std::string message = absl::StrCat(Where(expr, file, line), ": ", cudaGetErrorName(error),
                                           ": ", cudaGetErrorString(error));
  if (IsStickyCudaError(error)) {
    MarkStickyErrorSeen();
    return absl::UnavailableError(absl::StrCat("device lost (sticky CUDA error): ", message));
  }
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidMemcpyDirection:
    case cudaErrorInvalidPitchValue:
      return absl::InvalidArgumentError(message);
    case cudaErrorNotReady:
      return absl::FailedPreconditionError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorSystemNotReady:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorPeerAccessUnsupported:
    case cudaErrorNotSupported:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status CublasErrorToStatus(cublasStatus_t status, const char* expr, const char* file,
                                 int line) {
  const std::string message =
      absl::StrCat(Where(expr, file, line), ": ", cublasLtGetStatusName(status), ": ",
                   cublasLtGetStatusString(status));
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(message);
    case CUBLAS_STATUS_INVALID_VALUE:
      return absl::InvalidArgumentError(message);
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return absl::UnimplementedError(message);
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_EXECUTION_FAILED:
    case CUBLAS_STATUS_MAPPING_ERROR:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status NcclErrorToStatus(ncclResult_t result, const char* expr, const char* file, int line) {
  const char* last = ncclGetLastError(nullptr);
  std::string message = absl::StrCat(Where(expr, file, line), ": ", NcclResultName(result), ": ",
                                     ncclGetErrorString(result));
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&message, " (", last, ")");
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(message);
    case ncclRemoteError:
      return absl::AbortedError(message);
    case ncclSystemError:
    case ncclUnhandledCudaError:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace overlap::cuda
