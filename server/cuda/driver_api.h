// The few CUDA driver calls overlapd makes (virtual memory import/export and
// stream memory operations), reached through cudaGetDriverEntryPointByVersion:
// libcuda is never linked (server/CMakeLists.txt), so the daemon still starts
// where no driver is installed and falls back to the host backend.
//
// A leaf library (target overlap_cuda_driver): the CUDA runtime and abseil
// only, so that the engine (overlap_cuda) and the sessions' client library
// (client/session) share one table and one error mapping. The engine learns
// of lost contexts through SetLostContextHook.
//
// Thread safety: Driver() loads the table once; the table is immutable after.
// SetLostContextHook is called once, before any driver call.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/cuda/return_if_failed.h"

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

// Called (from any thread) each time a driver call reports a lost context;
// the engine installs one that marks itself unhealthy (cuda_check.h).
using LostContextHook = void (*)();
void SetLostContextHook(LostContextHook hook);

// A failed driver call as a Status: file:line, the call and the driver's
// error name. Out of memory -> RESOURCE_EXHAUSTED; bad values and handles ->
// INVALID_ARGUMENT; not supported -> FAILED_PRECONDITION; a lost context ->
// UNAVAILABLE and the lost-context hook; the rest UNAVAILABLE.
absl::Status CuResultToStatus(CUresult result, const char* expr, const char* file, int line);

// Stream memory operations on a 64-bit word another process may map: `stream`
// waits until the word is >= `value` (the GPU's front end holds it, no host
// thread waits), or writes `value` once the stream's earlier work is visible
// system-wide. Errors as CuResultToStatus.
absl::Status StreamWaitAtLeast(CUstream stream, CUdeviceptr word, uint64_t value);
absl::Status StreamWriteWord(CUstream stream, CUdeviceptr word, uint64_t value);

}  // namespace overlap::cuda

#define CU_RETURN_IF_ERROR(expr) \
  OVERLAP_RETURN_IF_FAILED(CUresult, expr, #expr, CUDA_SUCCESS, ::overlap::cuda::CuResultToStatus)
