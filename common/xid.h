// NVIDIA Xid errors: the driver's numbered reports of what went wrong on a GPU
// (`dmesg` shows them as "NVRM: Xid"). Some come from an application's bug (a
// kernel touched a bad address); others point at the GPU, its memory or its
// links. The daemon counts both kinds (NVML events) and `node`, `health` and
// `check` call a GPU unhealthy only for the second.
#pragma once

#include <cstdint>
#include <string>

namespace overlap {

// A few words on what Xid `xid` means, "" for one not listed here.
std::string XidMeaning(uint64_t xid);

// Whether Xid `xid` points at the GPU (memory, ECC, NVLink, bus, firmware)
// rather than at the application that ran on it.
bool XidPointsAtTheGpu(uint64_t xid);

// "Xid 79 (fallen off the bus)", or "Xid 200" for one without a meaning here.
std::string DescribeXid(uint64_t xid);

}  // namespace overlap
