// The few CUDA driver calls the engine makes (virtual memory import/export and
// stream memory operations), reached through cudaGetDriverEntryPointByVersion:
// libcuda is never linked (server/CMakeLists.txt), so the daemon still starts
// where no driver is installed and falls back to the host backend.
//
// Thread safety: Driver() loads the table once; the table is immutable after.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace overlap::cuda {

struct DriverApi {
  PFN_cuGetErrorName_v6000 GetErrorName = nullptr;
  PFN_cuMemCreate_v10020 MemCreate = nullptr;
  PFN_cuMemExportToShareableHandle_v10020 MemExportToShareableHandle = nullptr;
  PFN_cuMemImportFromShareableHandle_v10020 MemImportFromShareableHandle = nullptr;
  PFN_cuMemGetAllocationPropertiesFromHandle_v10020 MemGetAllocationPropertiesFromHandle = nullptr;
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

// The table, loaded on first use (that call initializes the CUDA runtime);
// UNAVAILABLE naming the first entry point the driver does not have.
absl::StatusOr<const DriverApi*> Driver();

// A failed driver call as a Status: file:line, the call and the driver's
// error name. Out of memory -> RESOURCE_EXHAUSTED; bad values and handles ->
// INVALID_ARGUMENT; not supported -> FAILED_PRECONDITION; a lost context ->
// UNAVAILABLE and StickyErrorSeen(); the rest UNAVAILABLE.
absl::Status CuResultToStatus(CUresult result, const char* expr, const char* file, int line);

}  // namespace overlap::cuda

#define CU_RETURN_IF_ERROR(expr)                                                            \
  do {                                                                                      \
    const CUresult overlap_cu_res_ = (expr);                                                \
    if (overlap_cu_res_ != CUDA_SUCCESS) {                                                  \
      return ::overlap::cuda::CuResultToStatus(overlap_cu_res_, #expr, __FILE__, __LINE__); \
    }                                                                                       \
  } while (0)
