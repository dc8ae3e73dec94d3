// Makes the driver report an Xid on purpose, to check that overlapd counts it:
// one kernel writes through a pointer that maps to nothing, the context dies
// with "an illegal memory access" and the driver logs an MMU fault (Xid 31, an
// application's fault; it does not point at the GPU). Only this process's
// context is lost; the GPU and every other process carry on.
//   xid_probe [device]
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

__global__ void WriteThrough(int* p) { *p = 1; }

int main(int argc, char** argv) {
  const int device = argc > 1 ? std::atoi(argv[1]) : 0;
  if (cudaSetDevice(device) != cudaSuccess) {
    std::fprintf(stderr, "xid_probe: no device %d\n", device);
    return 2;
  }
  // An address in no allocation: far above anything a small process maps.
  int* nowhere = reinterpret_cast<int*>(uintptr_t{1} << 46);
  WriteThrough<<<1, 1>>>(nowhere);
  const cudaError_t rc = cudaDeviceSynchronize();
  std::printf("xid_probe: device %d: %s\n", device, cudaGetErrorString(rc));
  return rc == cudaSuccess ? 1 : 0;  // 0: the fault happened, as asked
}
