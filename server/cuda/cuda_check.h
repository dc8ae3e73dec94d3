// Error checking for the CUDA runtime, cuBLAS(Lt) and NCCL: every failure becomes
// an absl::Status whose code means something and whose message names the call
// site (file:line), the library's error name and its description.
//
// Codes: out of memory -> RESOURCE_EXHAUSTED; sticky CUDA errors (the context is
// lost: illegal address, launch failure, ECC, ...) -> UNAVAILABLE, and the
// process-wide StickyErrorSeen() flag turns on so that the engine reports itself
// unhealthy; invalid usage -> INVALID_ARGUMENT; NCCL remote/system errors ->
// UNAVAILABLE (ABORTED comes from the watchdog when it aborts a communicator).
//
// NCCL communicators here are non-blocking, so ncclInProgress is not an error:
// NCCL_RETURN_IF_ERROR lets it through and the caller polls the communicator.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "absl/status/status.h"
#include "server/cuda/return_if_failed.h"

namespace overlap::cuda {

absl::Status CudaErrorToStatus(cudaError_t error, const char* expr, const char* file, int line);
absl::Status CublasErrorToStatus(cublasStatus_t status, const char* expr, const char* file,
                                 int line);
absl::Status NcclErrorToStatus(ncclResult_t result, const char* expr, const char* file, int line);

// True for errors after which the CUDA context is unusable until the process exits.
bool IsStickyCudaError(cudaError_t error);
// Set (forever) once any sticky error was converted by CudaErrorToStatus.
bool StickyErrorSeen();
void MarkStickyErrorSeen();

}  // namespace overlap::cuda

#define CUDA_RETURN_IF_ERROR(expr)                                \
  OVERLAP_RETURN_IF_FAILED(cudaError_t, expr, #expr, cudaSuccess, \
                           ::overlap::cuda::CudaErrorToStatus)

#define CUBLAS_RETURN_IF_ERROR(expr)                                           \
  OVERLAP_RETURN_IF_FAILED(cublasStatus_t, expr, #expr, CUBLAS_STATUS_SUCCESS, \
                           ::overlap::cuda::CublasErrorToStatus)

// Not the shared shape: ncclInProgress passes (non-blocking communicators).
#define NCCL_RETURN_IF_ERROR(expr)                                                             \
  do {                                                                                         \
    const ncclResult_t overlap_nccl_res_ = (expr);                                             \
    if (overlap_nccl_res_ != ncclSuccess && overlap_nccl_res_ != ncclInProgress) {             \
      return ::overlap::cuda::NcclErrorToStatus(overlap_nccl_res_, #expr, __FILE__, __LINE__); \
    }                                                                                          \
  } while (0)
