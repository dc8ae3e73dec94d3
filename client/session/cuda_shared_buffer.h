// Device memory another process can map, for a rank of a session on the CUDA
// backend: a cuMemCreate allocation that can be exported as a POSIX file
// descriptor (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), mapped here, whose fd
// the rank registers (Session::Register) and the daemon imports. The fd is
// the capability: it works between processes of different users, where
// legacy CUDA IPC handles do not promise to (docs/SESSIONS.md).
//
// And the two stream-ordered signals of a step (common/session_ring.h): the
// rank's stream writes "inputs ready" = seq once the work that wrote the
// command's inputs is done, and waits for "outputs ready" >= seq before the
// work that reads its outputs. No host thread waits for the GPU.
//
// Built only where the CUDA toolkit is (target overlapd_session_cuda). Streams
// are cudaStream_t passed as void* so that this header needs no CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/unix_frames.h"

namespace overlap::session {

class CudaSharedBuffer {
 public:
  // `bytes` (rounded up to the allocation granularity) on CUDA device
  // `device` (as this process numbers them), readable and writable here.
  static absl::StatusOr<CudaSharedBuffer> Create(int device, size_t bytes);
  CudaSharedBuffer() = default;
  CudaSharedBuffer(CudaSharedBuffer&& other) noexcept;
  CudaSharedBuffer& operator=(CudaSharedBuffer&& other) noexcept;
  ~CudaSharedBuffer();

  int fd() const { return fd_.get(); }                          // what Session::Register takes
  void* data() const { return reinterpret_cast<void*>(ptr_); }  // a device pointer
  size_t size() const { return size_; }

 private:
  void Reset();
  OwnedFd fd_;
  uint64_t handle_ = 0;  // CUmemGenericAllocationHandle
  uint64_t ptr_ = 0;     // CUdeviceptr
  size_t size_ = 0;
};

// The CUDA device (this process's numbering) whose PCI bus id is `bus_id`
// (OpenSessionReply::device_pci_bus_id); NOT_FOUND when none is.
absl::StatusOr<int> CudaDeviceForBusId(const std::string& bus_id);

// On `stream`: the signals' "inputs ready" word becomes `seq` once the work
// before it is done.
absl::Status SignalInputsReady(void* stream, const CudaSharedBuffer& signals, uint64_t seq);
// On `stream`: later work waits until "outputs ready" >= `seq`.
absl::Status WaitOutputsReady(void* stream, const CudaSharedBuffer& signals, uint64_t seq);

}  // namespace overlap::session
