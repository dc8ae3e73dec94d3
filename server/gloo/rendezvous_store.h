// The key-value store the ranks of a cross-process group meet in: each rank
// publishes its transport addresses under the group's prefix and waits for the
// others'. On a cluster it is served by the job's coordinator over gRPC
// (Debian's Gloo has only File, Hash, Prefix and Redis stores); tests and the
// coordinator itself use the in-memory one.
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace overlap::gloo_group {

// Keys are set once per group and never change while its ranks connect; values
// are opaque bytes (Gloo's socket addresses), not text.
class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // Waits until `key` is set; DEADLINE_EXCEEDED naming the key after `timeout`.
  virtual absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) = 0;
};

// What one store holds at most: it is served to other daemons, and a job's
// keys (Gloo's addresses, NCCL's ids) are small.
struct StoreLimits {
  size_t max_key_bytes = 256;
  size_t max_value_bytes = 4 << 20;
  size_t max_total_bytes = 64 << 20;  // keys and values
};

// Thread-safe, within one process.
class InMemoryRendezvousStore final : public RendezvousStore {
 public:
  explicit InMemoryRendezvousStore(StoreLimits limits = StoreLimits()) : limits_(limits) {}

  // Setting a key again replaces its value. INVALID_ARGUMENT for an empty or
  // too long key, RESOURCE_EXHAUSTED for a value or a store past its limit.
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override;

  // Drops every key (the coordinator, once a job's groups have connected).
  void Clear();
  size_t size() const;

 private:
  const StoreLimits limits_;
  mutable absl::Mutex mu_;
  std::unordered_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  size_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace overlap::gloo_group
