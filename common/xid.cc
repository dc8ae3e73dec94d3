#include "common/xid.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace overlap {
namespace {

struct XidInfo {
  const char* meaning;
  bool gpu;  // points at the GPU, not the application
};

// From NVIDIA's Xid catalogue, the ones a compute node meets; worded here.
const std::map<uint64_t, XidInfo>& Catalogue() {
  static const auto* table = new std::map<uint64_t, XidInfo>{
      {13, {"graphics engine exception, usually an application's bad access", false}},
      {31, {"GPU memory page fault, usually an application's bad address", false}},
      {43, {"GPU stopped processing after an application's fault", false}},
      {45, {"preemptive cleanup after an earlier error", false}},
      {48, {"double-bit ECC error", true}},
      {61, {"internal micro-controller breakpoint", true}},
      {62, {"internal micro-controller halt", true}},
      {63, {"ECC page retirement or row remap recorded", true}},
      {64, {"ECC page retirement or row remap failed", true}},
      {68, {"video processor exception", false}},
      {69, {"graphics engine class error", false}},
      {74, {"NVLink error", true}},
      {79, {"fallen off the bus", true}},
      {92, {"high single-bit ECC error rate", true}},
      {94, {"contained ECC error", true}},
      {95, {"uncontained ECC error", true}},
      {109, {"context switch timeout", false}},
      {119, {"GSP firmware RPC timeout", true}},
      {120, {"GSP firmware error", true}},
      {121, {"C2C link error", true}},
      {140, {"unrecovered ECC error", true}},
  };
  return *table;
}

}  // namespace

std::string XidMeaning(uint64_t xid) {
  auto it = Catalogue().find(xid);
  return it == Catalogue().end() ? "" : it->second.meaning;
}

bool XidPointsAtTheGpu(uint64_t xid) {
  auto it = Catalogue().find(xid);
  return it != Catalogue().end() && it->second.gpu;
}

std::string DescribeXid(uint64_t xid) {
  const std::string meaning = XidMeaning(xid);
  return meaning.empty() ? absl::StrCat("Xid ", xid)
                         : absl::StrCat("Xid ", xid, " (", meaning, ")");
}

}  // namespace overlap
