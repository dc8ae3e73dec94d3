#include "client/session/overlapd_session.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/seeded_random.h"
#include "overlap/v1/session.pb.h"

namespace overlap::session {
namespace {

int64_t MonotonicNs() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

absl::Status FromFrame(const v1::SessionStatus& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.code()), status.message());
}

absl::StatusOr<v1::SessionFrame> ReadFrame(int socket, absl::Duration timeout,
                                           std::vector<OwnedFd>* fds) {
  absl::StatusOr<Frame> frame = ReceiveFrame(socket, size_t{1} << 24, timeout);
  if (!frame.ok()) {
    return absl::Status(frame.status().code(),
                        absl::StrCat("session socket: ", frame.status().message()));
  }
  v1::SessionFrame parsed;
  if (!parsed.ParseFromString(frame->bytes)) {
    return absl::InternalError("session socket: the daemon sent a frame that does not parse");
  }
  if (fds != nullptr) *fds = std::move(frame->fds);
  return parsed;
}

}  // namespace

uint64_t TensorSeed(uint64_t base, const std::string& op, Tensor tensor, int rank) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a of the op id
  for (unsigned char c : op) hash = (hash ^ c) * 1099511628211ull;
  return SplitMix64(base ^ SplitMix64(hash ^ (static_cast<uint64_t>(tensor) << 56) ^
                                      static_cast<uint64_t>(rank)));
}

absl::StatusOr<SharedBuffer> SharedBuffer::Create(size_t bytes, const std::string& name) {
  SharedBuffer buffer;
  buffer.fd_ = OwnedFd(::memfd_create(name.c_str(), MFD_CLOEXEC));
  if (!buffer.fd_.valid()) {
    return absl::ResourceExhaustedError(absl::StrCat("memfd_create: ", std::strerror(errno)));
  }
  const size_t mapped = bytes > 0 ? bytes : 1;
  if (::ftruncate(buffer.fd_.get(), static_cast<off_t>(mapped)) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("ftruncate: ", std::strerror(errno)));
  }
  void* data = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, buffer.fd_.get(), 0);
  if (data == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("mmap: ", std::strerror(errno)));
  }
  buffer.data_ = data;
  buffer.size_ = mapped;
  return buffer;
}

SharedBuffer::SharedBuffer(SharedBuffer&& other) noexcept
    : fd_(std::move(other.fd_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

SharedBuffer& SharedBuffer::operator=(SharedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    fd_ = std::move(other.fd_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SharedBuffer::~SharedBuffer() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

absl::StatusOr<std::unique_ptr<Session>> Session::Open(const std::string& socket_path,
                                                       const std::string& name,
                                                       const std::string& graph_text, int rank,
                                                       const SessionOptions& options) {
  absl::string_view path = socket_path;
  absl::ConsumePrefix(&path, "unix:");
  std::unique_ptr<Session> session(new Session());
  session->options_ = options;
  session->rank_ = rank;
  session->socket_ = OwnedFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!session->socket_.valid()) {
    return absl::UnavailableError(absl::StrCat("socket(): ", std::strerror(errno)));
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path too long: ", path));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (::connect(session->socket_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to the session socket ", path, ": ", std::strerror(errno)));
  }
  v1::SessionFrame open;
  v1::OpenSessionRequest& request = *open.mutable_open();
  request.set_name(name);
  request.set_graph(graph_text);
  request.set_rank(rank);
  request.set_priority(options.priority);
  request.set_deferred_bound_ms(options.deferred_bound_ms);
  request.set_join_timeout_s(options.join_timeout_s);
  request.set_step_timeout_s(options.step_timeout_s);
  request.set_chunk_kib(options.chunk_kib);
  absl::Status sent = SendFrame(session->socket_.get(), open.SerializeAsString());
  if (!sent.ok()) return sent;
  std::vector<OwnedFd> fds;
  absl::StatusOr<v1::SessionFrame> reply =
      ReadFrame(session->socket_.get(), options.reply_timeout, &fds);
  if (!reply.ok()) return reply.status();
  if (reply->has_status()) {
    absl::Status refused = FromFrame(reply->status());
    return refused.ok() ? absl::InternalError("the daemon answered an open with no session")
                        : refused;
  }
  if (!reply->has_opened() || fds.size() != 3) {
    return absl::InternalError("the daemon's open reply is malformed (3 fds expected)");
  }
  const v1::OpenSessionReply& opened = reply->opened();
  session->id_ = opened.session_id();
  session->device_ = opened.device();
  session->world_ = opened.world();
  session->backend_ = opened.backend();
  session->device_pci_bus_id_ = opened.device_pci_bus_id();
  for (const std::string& op : opened.ops()) session->ops_.push_back(op);
  for (const v1::TensorNeed& need : opened.needs()) {
    session->needs_.push_back(TensorNeed{need.op(), static_cast<Tensor>(need.tensor()), need.rows(),
                                         need.cols(), need.dtype(), need.bytes()});
  }
  session->ring_fd_ = std::move(fds[0]);
  session->posted_doorbell_ = std::move(fds[1]);
  session->completed_doorbell_ = std::move(fds[2]);
  void* ring = ::mmap(nullptr, kSessionRingBytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                      session->ring_fd_.get(), 0);
  if (ring == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("mmap of the ring: ", std::strerror(errno)));
  }
  session->ring_ = static_cast<SessionRing*>(ring);
  if (session->ring_->magic != kSessionRingMagic ||
      session->ring_->version != kSessionRingVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("the daemon's ring is version ", session->ring_->version,
                     ", this client speaks ", kSessionRingVersion));
  }
  session->last_posted_ = session->ring_->posted.load(std::memory_order_acquire);
  return session;
}

Session::~Session() { Close(); }

void Session::Close() {
  // A started rank says it leaves on purpose: the daemon then ends the
  // session "closed" rather than failed (a killed process sends nothing).
  if (started_ && socket_.valid()) {
    v1::SessionFrame frame;
    frame.mutable_leave();
    (void)SendFrame(socket_.get(), frame.SerializeAsString());
  }
  started_ = false;
  socket_ = OwnedFd();
  if (ring_ != nullptr) ::munmap(ring_, kSessionRingBytes);
  ring_ = nullptr;
  ring_fd_ = OwnedFd();
  posted_doorbell_ = OwnedFd();
  completed_doorbell_ = OwnedFd();
  signals_ = nullptr;
}

const TensorNeed* Session::FindNeed(const std::string& op, Tensor tensor) const {
  for (const TensorNeed& need : needs_) {
    if (need.op == op && need.tensor == tensor) return &need;
  }
  return nullptr;
}

absl::Status Session::Exchange(const std::string& frame, const std::vector<int>& fds,
                               absl::Duration timeout) {
  if (!socket_.valid()) return absl::FailedPreconditionError("the session is closed");
  absl::Status sent = SendFrame(socket_.get(), frame, fds);
  // A daemon that ended the connection may have said why first.
  absl::StatusOr<v1::SessionFrame> reply =
      ReadFrame(socket_.get(), sent.ok() ? timeout : absl::Milliseconds(100), nullptr);
  if (!sent.ok() && (!reply.ok() || !reply->has_status())) return sent;
  if (!reply.ok()) return reply.status();
  if (!reply->has_status()) return absl::InternalError("the daemon sent no status");
  return FromFrame(reply->status());
}

absl::Status Session::Register(const std::string& op, Tensor tensor, int fd, int64_t offset,
                               int64_t bytes, void* mapped) {
  v1::SessionFrame frame;
  v1::RegisterTensorRequest& request = *frame.mutable_register_tensor();
  request.set_op(op);
  request.set_tensor(static_cast<v1::SessionTensor>(tensor));
  request.set_offset(offset);
  request.set_bytes(bytes);
  absl::Status status = Exchange(frame.SerializeAsString(), {fd}, options_.reply_timeout);
  if (status.ok() && tensor == Tensor::kSignals && mapped != nullptr) {
    signals_ = static_cast<uint64_t*>(mapped);
  }
  return status;
}

absl::Status Session::Start() {
  v1::SessionFrame frame;
  frame.mutable_start();
  absl::Status started = Exchange(frame.SerializeAsString(), {}, options_.reply_timeout);
  started_ = started.ok();
  return started;
}

absl::Status Session::Failure() const {
  if (ring_ == nullptr) return absl::FailedPreconditionError("the session is closed");
  const int32_t code = ring_->failed_code.load(std::memory_order_acquire);
  if (code == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(code),
                      std::string(ring_->failed_message,
                                  strnlen(ring_->failed_message, sizeof(ring_->failed_message))));
}

absl::StatusOr<uint64_t> Session::Post(const std::string& op) {
  if (op.empty()) return Post(kSessionRunLayer);
  for (size_t i = 0; i < ops_.size(); ++i) {
    if (ops_[i] == op) return Post(static_cast<int>(i));
  }
  return absl::InvalidArgumentError(absl::StrCat("the session's graph has no op ", op));
}

absl::StatusOr<uint64_t> Session::Post(int op) {
  if (absl::Status failed = Failure(); !failed.ok()) return failed;
  if (op != kSessionRunLayer && (op < 0 || op >= static_cast<int>(ops_.size()))) {
    return absl::InvalidArgumentError(absl::StrCat("op index ", op, " is out of range"));
  }
  if (last_posted_ - ring_->completed.load(std::memory_order_acquire) >= kSessionRingSlots) {
    return absl::ResourceExhaustedError(
        absl::StrCat(kSessionRingSlots, " commands are outstanding: wait for one first"));
  }
  const uint64_t seq = last_posted_ + 1;
  SessionCommand& slot = ring_->slots[seq % kSessionRingSlots];
  slot.seq = seq;
  slot.op = op;
  slot.posted_ns = MonotonicNs();
  // The inputs are in host memory the daemon maps: ready now.
  if (signals_ != nullptr) {
    __atomic_store_n(&signals_[kSignalInputsReadyOffset / sizeof(uint64_t)], seq, __ATOMIC_RELEASE);
  }
  ring_->posted.store(seq, std::memory_order_release);
  last_posted_ = seq;
  const uint64_t one = 1;
  if (::write(posted_doorbell_.get(), &one, sizeof(one)) != sizeof(one)) {
    return absl::UnavailableError(absl::StrCat("doorbell: ", std::strerror(errno)));
  }
  return seq;
}

absl::Status Session::Wait(uint64_t seq, absl::Duration timeout) {
  if (ring_ == nullptr) return absl::FailedPreconditionError("the session is closed");
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (ring_->completed.load(std::memory_order_acquire) >= seq) {
      const SessionCommand& slot = ring_->slots[seq % kSessionRingSlots];
      if (slot.seq == seq && slot.status != 0) {
        return absl::Status(static_cast<absl::StatusCode>(slot.status),
                            absl::StrCat("command ", seq, " failed"));
      }
      return absl::OkStatus();
    }
    if (absl::Status failed = Failure(); !failed.ok()) return failed;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat("command ", seq, " did not complete within ",
                                                      absl::FormatDuration(timeout)));
    }
    pollfd fd{completed_doorbell_.get(), POLLIN, 0};
    const int ms = static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1000));
    if (::poll(&fd, 1, ms) > 0 && (fd.revents & POLLIN)) {
      uint64_t count = 0;
      (void)!::read(completed_doorbell_.get(), &count, sizeof(count));
    }
  }
}

SessionCommand Session::Command(uint64_t seq) const {
  SessionCommand copy{};
  if (ring_ != nullptr) std::memcpy(&copy, &ring_->slots[seq % kSessionRingSlots], sizeof(copy));
  return copy;
}

}  // namespace overlap::session
