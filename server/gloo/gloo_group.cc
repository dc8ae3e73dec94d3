#include "server/gloo/gloo_group.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"

namespace overlap::gloo_group {
namespace {

// What the store adapter throws through Gloo's connectFullMesh, which only
// knows exceptions; Connect catches it and returns the store's own status.
struct StoreError : std::exception {
  explicit StoreError(absl::Status s) : status(std::move(s)) {}
  const char* what() const noexcept override { return "rendezvous store error"; }
  absl::Status status;
};

// Gloo's view of a RendezvousStore, under the group's prefix. Every wait is
// bounded by one deadline for the whole Connect: Gloo waits for the ranks one
// after another, each with its own timeout, which would add up.
class StoreAdapter final : public ::gloo::rendezvous::Store {
 public:
  StoreAdapter(RendezvousStore& store, std::string prefix, absl::Time deadline)
      : store_(store), prefix_(std::move(prefix)), deadline_(deadline) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    absl::Status status = store_.Set(FullKey(key), std::string(data.begin(), data.end()));
    if (!status.ok()) throw StoreError(std::move(status));
    keys_set_.push_back(key);
  }

  std::vector<char> get(const std::string& key) override {
    const std::string& value = Fetch(key);
    return std::vector<char>(value.begin(), value.end());
  }

  void wait(const std::vector<std::string>& keys) override {
    for (const std::string& key : keys) Fetch(key);
  }

  // Gloo's timeout is the context's, shortened for its pair connects (Connect).
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    wait(keys);
  }

  std::string FullKey(const std::string& key) const { return absl::StrCat(prefix_, "/", key); }
  const std::vector<std::string>& keys_set() const { return keys_set_; }

 private:
  // Gloo waits for a key and then gets it: one round trip to a remote store.
  const std::string& Fetch(const std::string& key) {
    auto it = fetched_.find(key);
    if (it != fetched_.end()) return it->second;
    absl::StatusOr<std::string> value =
        store_.Get(FullKey(key), std::max(deadline_ - absl::Now(), absl::ZeroDuration()));
    if (!value.ok()) throw StoreError(value.status());
    return fetched_.emplace(key, *std::move(value)).first->second;
  }

  RendezvousStore& store_;
  const std::string prefix_;
  const absl::Time deadline_;
  std::unordered_map<std::string, std::string> fetched_;
  std::vector<std::string> keys_set_;
};

// The status of the exception being handled. Gloo throws IoException for a
// transport failure, whose message alone tells a timeout from a broken link.
absl::Status CurrentExceptionStatus() {
  try {
    throw;
  } catch (const StoreError& e) {
    return e.status;
  } catch (const ::gloo::IoException& e) {
    const std::string message = absl::AsciiStrToLower(e.what());
    if (absl::StrContains(message, "timeout") || absl::StrContains(message, "timed out")) {
      return absl::DeadlineExceededError(e.what());
    }
    return absl::AbortedError(e.what());
  } catch (const ::gloo::EnforceNotMet& e) {
    return absl::InternalError(absl::StrCat("Gloo assertion failed: ", e.what()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of host memory");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("Gloo: ", e.what()));
  } catch (...) {
    return absl::UnknownError("Gloo threw a non-standard exception");
  }
}

std::string Describe(const GlooGroupOptions& options, const char* op) {
  return absl::StrCat("gloo group '", options.prefix, "' rank ", options.rank, "/", options.size,
                      ": ", op, ": ");
}

absl::Status WithContext(const GlooGroupOptions& options, const char* op,
                         const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(Describe(options, op), status.message()));
}

std::chrono::milliseconds ToMillis(absl::Duration d) {
  return std::max(absl::ToChronoMilliseconds(d), std::chrono::milliseconds(1));
}

absl::Status ValidateOptions(const GlooGroupOptions& o) {
  if (o.size < 1) return absl::InvalidArgumentError(absl::StrCat("size ", o.size, " < 1"));
  if (o.rank < 0 || o.rank >= o.size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", o.rank, " not in [0, ", o.size, ")"));
  }
  if (o.prefix.empty()) return absl::InvalidArgumentError("empty prefix");
  if (o.bind_address.empty()) return absl::InvalidArgumentError("empty bind_address");
  // Gloo reads a zero timeout as "wait forever", and an infinite one overflows.
  if (o.timeout <= absl::ZeroDuration() || o.timeout == absl::InfiniteDuration() ||
      o.timeout > absl::Hours(24)) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout ", absl::FormatDuration(o.timeout), " not in (0, 24h]"));
  }
  return absl::OkStatus();
}

// Gloo's TCP transport writes with plain writev(2): a write to a peer that died
// raises SIGPIPE, whose default action ends the process.
void IgnoreSigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && !(current.sa_flags & SA_SIGINFO) &&
        current.sa_handler == SIG_DFL) {
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      sigemptyset(&ignore.sa_mask);
      sigaction(SIGPIPE, &ignore, nullptr);
    }
  });
}

// The ranks that never showed up in the store. The first key Gloo sets for a
// rank ends with its number ("rank_<r>" in this snapshot, which every rank
// sets before anything else); the same key of the other ranks tells whether
// they came. Nothing is guessed when this rank's first key is not of that form.
std::vector<int> MissingRanks(RendezvousStore& store, const GlooGroupOptions& options,
                              const StoreAdapter& adapter) {
  if (adapter.keys_set().empty()) return {};
  const std::string& first = adapter.keys_set().front();
  const std::string own = std::to_string(options.rank);
  if (!absl::EndsWith(first, own)) return {};
  const std::string stem = first.substr(0, first.size() - own.size());
  std::vector<int> missing;
  for (int r = 0; r < options.size; ++r) {
    if (r == options.rank) continue;
    if (!store.Get(adapter.FullKey(absl::StrCat(stem, r)), absl::ZeroDuration()).ok()) {
      missing.push_back(r);
    }
  }
  return missing;
}

// Element-wise sums for Gloo's reduce function: out = a + b, any of which may
// alias. 16-bit types are summed in fp32 and rounded back once per call, as
// Gloo's ring adds one rank's partial at a time.
void SumF32(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<float*>(out);
  const auto* x = static_cast<const float*>(a);
  const auto* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void Sum16(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<uint16_t*>(out);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = FromFloat(ToFloat(x[i]) + ToFloat(y[i]));
}

absl::Status CheckSummable(DType dtype) {
  if (dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no sum in ", DTypeName(dtype), " (fp8 is only gathered)"));
}

// Bytes of `count` elements times `blocks`, or an error when it overflows.
absl::StatusOr<size_t> Bytes(DType dtype, size_t count, size_t blocks) {
  const size_t element = DTypeSize(dtype);
  if (count > std::numeric_limits<size_t>::max() / element / blocks) {
    return absl::InvalidArgumentError(absl::StrCat("count ", count, " overflows"));
  }
  return count * element * blocks;
}

// Sums `count` elements of `data` in place across the group.
void GlooAllReduce(const std::shared_ptr<::gloo::Context>& context, DType dtype, void* data,
                   size_t count, uint32_t tag, std::chrono::milliseconds timeout) {
  ::gloo::AllreduceOptions opts(context);
  if (dtype == DType::kF32) {
    opts.setOutput(static_cast<float*>(data), count);
    opts.setReduceFunction(&SumF32);
  } else {
    opts.setOutput(static_cast<uint16_t*>(data), count);
    opts.setReduceFunction(dtype == DType::kBF16 ? &Sum16<Bf16ToFloat, FloatToBf16>
                                                 : &Sum16<Fp16ToFloat, FloatToFp16>);
  }
  opts.setTag(tag);
  opts.setTimeout(timeout);
  ::gloo::allreduce(opts);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GlooGroup>> GlooGroup::Connect(RendezvousStore& store,
                                                              const GlooGroupOptions& options) {
  if (absl::Status valid = ValidateOptions(options); !valid.ok()) {
    return WithContext(options, "Connect", valid);
  }
  IgnoreSigpipe();
  const absl::Time start = absl::Now();

  std::shared_ptr<::gloo::transport::Device> device;
  try {
    ::gloo::transport::tcp::attr attr;
    attr.hostname = options.bind_address;
    device = ::gloo::transport::tcp::CreateDevice(attr);
  } catch (...) {
    return WithContext(
        options, "Connect",
        absl::UnavailableError(absl::StrCat("cannot bind a TCP device to '", options.bind_address,
                                            "': ", CurrentExceptionStatus().message())));
  }

  auto context = std::make_shared<::gloo::rendezvous::Context>(options.rank, options.size);
  // A pair waits 5x the context's timeout for its peer to connect; a fifth keeps
  // a peer that published its address and died from holding Connect 5x longer.
  // The store waits are bounded by the adapter's deadline instead.
  context->setTimeout(ToMillis(options.timeout / 5));
  StoreAdapter adapter(store, options.prefix, start + options.timeout);
  try {
    context->connectFullMesh(adapter, device);
  } catch (...) {
    absl::Status status = CurrentExceptionStatus();
    if (absl::IsDeadlineExceeded(status)) {
      std::vector<int> missing = MissingRanks(store, options, adapter);
      if (!missing.empty()) {
        status = absl::DeadlineExceededError(
            absl::StrCat("rank(s) ", absl::StrJoin(missing, ", "), " did not join within ",
                         absl::FormatDuration(options.timeout), " (", status.message(), ")"));
      }
    }
    return WithContext(options, "Connect", status);
  }
  context->setTimeout(ToMillis(options.timeout));
  GetLogger("gloo")->debug("gloo group '{}' rank {}/{} connected on {} in {}", options.prefix,
                           options.rank, options.size, options.bind_address,
                           absl::FormatDuration(absl::Now() - start));
  return std::unique_ptr<GlooGroup>(new GlooGroup(options, std::move(context)));
}

GlooGroup::GlooGroup(GlooGroupOptions options, std::shared_ptr<::gloo::Context> context)
    : options_(std::move(options)), context_(std::move(context)) {}

GlooGroup::~GlooGroup() = default;

absl::Status GlooGroup::OpError(const char* op, absl::Status status) const {
  return WithContext(options_, op, status);
}

template <typename Fn>
absl::Status GlooGroup::Run(const char* op, Fn&& fn) {
  if (!broken_.ok()) {
    return OpError(op, absl::AbortedError(absl::StrCat("the group is broken since an earlier ",
                                                       "error: ", broken_.message())));
  }
  try {
    fn();
    return absl::OkStatus();
  } catch (...) {
    // A collective that threw may have left transfers half done on any pair:
    // the group cannot be trusted again, as an aborted NCCL communicator.
    broken_ = OpError(op, CurrentExceptionStatus());
    // Gloo closes only the failed pair; closing the others makes the ranks
    // still waiting on this one fail now instead of at their timeout.
    try {
      context_->closeConnections();
    } catch (...) {
    }
    return broken_;
  }
}

absl::StatusOr<size_t> GlooGroup::BufferBytes(const char* op, DType dtype, const void* send,
                                              const void* recv, size_t count, size_t blocks) const {
  if (send == nullptr || recv == nullptr) {
    return OpError(op, absl::InvalidArgumentError("null buffer"));
  }
  absl::StatusOr<size_t> bytes = Bytes(dtype, count, blocks);
  if (!bytes.ok()) return OpError(op, bytes.status());
  return bytes;
}

absl::Status GlooGroup::AllReduce(DType dtype, const void* send, void* recv, size_t count) {
  if (absl::Status s = CheckSummable(dtype); !s.ok()) return OpError("AllReduce", s);
  if (count == 0) return absl::OkStatus();
  absl::StatusOr<size_t> bytes = BufferBytes("AllReduce", dtype, send, recv, count, 1);
  if (!bytes.ok()) return bytes.status();
  if (send != recv) std::memcpy(recv, send, *bytes);
  return Run("AllReduce", [&] {
    GlooAllReduce(context_, dtype, recv, count, NextTag(*bytes), ToMillis(options_.timeout));
  });
}

absl::Status GlooGroup::AllGather(DType dtype, const void* send, void* recv, size_t count) {
  if (count == 0) return absl::OkStatus();
  absl::StatusOr<size_t> total = BufferBytes("AllGather", dtype, send, recv, count, options_.size);
  if (!total.ok()) return total.status();
  const size_t block = *total / options_.size;
  auto* out = static_cast<uint8_t*>(recv);
  uint8_t* own = out + block * options_.rank;
  if (send != own) std::memcpy(own, send, block);
  return Run("AllGather", [&] {
    ::gloo::AllgatherOptions opts(context_);
    opts.setOutput(out, *total);
    opts.setTag(NextTag(*total));
    opts.setTimeout(ToMillis(options_.timeout));
    ::gloo::allgather(opts);
  });
}

absl::Status GlooGroup::ReduceScatter(DType dtype, const void* send, void* recv, size_t count) {
  if (absl::Status s = CheckSummable(dtype); !s.ok()) return OpError("ReduceScatter", s);
  if (count == 0) return absl::OkStatus();
  absl::StatusOr<size_t> total =
      BufferBytes("ReduceScatter", dtype, send, recv, count, options_.size);
  if (!total.ok()) return total.status();
  const size_t block = *total / options_.size;
  // An all-reduce of the whole of send, of which this rank keeps its block:
  // twice the bytes of a true reduce-scatter, fine on the host backend. This
  // snapshot's reduce-scatter is the old templated Algorithm: an int count, a
  // ReductionFunction<T> over a T with arithmetic (no bf16) and no timeout.
  // The scratch copy also lets recv overlap send. It keeps the largest size
  // seen, as a stream thread reuses one shape per job.
  if (scratch_.size() < *total) {
    try {
      scratch_.resize(*total);
    } catch (const std::bad_alloc&) {
      return OpError("ReduceScatter", absl::ResourceExhaustedError(
                                          absl::StrCat("no ", *total, " bytes of scratch")));
    }
  }
  std::memcpy(scratch_.data(), send, *total);
  RETURN_IF_ERROR(Run("ReduceScatter", [&] {
    GlooAllReduce(context_, dtype, scratch_.data(), count * options_.size, NextTag(*total),
                  ToMillis(options_.timeout));
  }));
  std::memcpy(recv, scratch_.data() + block * options_.rank, block);
  return absl::OkStatus();
}

absl::Status GlooGroup::Barrier() {
  return Run("Barrier", [&] {
    ::gloo::BarrierOptions opts(context_);
    opts.setTag(NextTag(0));
    opts.setTimeout(ToMillis(options_.timeout));
    ::gloo::barrier(opts);
  });
}

}  // namespace overlap::gloo_group
