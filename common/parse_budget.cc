#include "common/parse_budget.h"

#include <algorithm>
#include <utility>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "absl/strings/str_cat.h"
#include "common/spec_prescan.h"

namespace overlap {
namespace {

// A parse estimated at this much or more hands its memory back to the system
// when it ends: glibc keeps freed chunks in the arena of the thread that freed
// them (gRPC runs calls on many threads), and a trim costs a walk of the heap
// that a small parse does not pay for.
constexpr int64_t kTrimAfterBytes = 8 << 20;

void ReturnFreedMemory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace

ParseBudget::ParseBudget(int64_t capacity_bytes, absl::Duration max_wait)
    : capacity_(std::max<int64_t>(capacity_bytes, 1)), max_wait_(max_wait) {}

int64_t ParseBudget::CapacityFor(int64_t max_spec_bytes) {
  PrescanFacts all_values;
  all_values.nodes = std::min<int64_t>(PrescanLimits().max_nodes, max_spec_bytes / 2);
  const int64_t largest = EstimatedParseBytes(max_spec_bytes, all_values);
  return std::max<int64_t>(int64_t{64} << 20, 2 * largest);
}

absl::StatusOr<ParseBudget::Grant> ParseBudget::Acquire(int64_t bytes) {
  bytes = std::clamp<int64_t>(bytes, 0, capacity_);
  absl::MutexLock lock(&mu_);
  auto fits = [this, bytes]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_use_ + bytes <= capacity_; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&fits), max_wait_)) {
    ++refused_;
    return absl::ResourceExhaustedError(absl::StrCat(
        "the daemon is parsing too much at once (", in_use_ >> 20, " MiB of its ", capacity_ >> 20,
        " MiB for parsing in use, this spec needs ", bytes >> 20, " MiB): try again shortly"));
  }
  in_use_ += bytes;
  peak_ = std::max(peak_, in_use_);
  return Grant(this, bytes);
}

void ParseBudget::Release(int64_t bytes) {
  {
    absl::MutexLock lock(&mu_);
    in_use_ -= bytes;
  }
  if (bytes >= kTrimAfterBytes) ReturnFreedMemory();  // outside the lock: it walks the heap
}

int64_t ParseBudget::in_use_bytes() const {
  absl::MutexLock lock(&mu_);
  return in_use_;
}

int64_t ParseBudget::peak_bytes() const {
  absl::MutexLock lock(&mu_);
  return peak_;
}

int64_t ParseBudget::refused() const {
  absl::MutexLock lock(&mu_);
  return refused_;
}

ParseBudget::Grant::Grant(Grant&& other) noexcept
    : budget_(std::exchange(other.budget_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

ParseBudget::Grant& ParseBudget::Grant::operator=(Grant&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = std::exchange(other.budget_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

ParseBudget::Grant::~Grant() { Release(); }

void ParseBudget::Grant::Release() {
  if (budget_ != nullptr) budget_->Release(bytes_);
  budget_ = nullptr;
  bytes_ = 0;
}

}  // namespace overlap
