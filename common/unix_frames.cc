#include "common/unix_frames.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace overlap {
namespace {

constexpr size_t kLengthBytes = 4;

absl::Status Errno(absl::string_view what) {
  int err = errno;
  if (err == EPIPE || err == ECONNRESET) {
    return absl::UnavailableError(absl::StrCat(what, ": the peer has gone"));
  }
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(err)));
}

// Waits until `socket` is readable or `deadline` passes.
absl::Status WaitReadable(int socket, absl::Time deadline) {
  while (true) {
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("no frame in time");
    pollfd p{socket, POLLIN, 0};
    int ms = static_cast<int>(absl::ToInt64Milliseconds(left)) + 1;
    int n = ::poll(&p, 1, ms);
    if (n > 0) return absl::OkStatus();
    if (n < 0 && errno != EINTR) return Errno("poll");
  }
}

// Reads exactly `size` bytes into `out`, collecting any fds that arrive.
absl::Status ReadFull(int socket, char* out, size_t size, absl::Time deadline,
                      std::vector<OwnedFd>* fds, bool* too_many_fds) {
  size_t done = 0;
  while (done < size) {
    if (absl::Status s = WaitReadable(socket, deadline); !s.ok()) return s;
    iovec iov{out + done, size - done};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFrameFds)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Errno("recvmsg");
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds->emplace_back(fd);
      }
    }
    // The kernel cut the fds off: more came than our control buffer holds.
    if ((msg.msg_flags & MSG_CTRUNC) != 0) *too_many_fds = true;
    if (n == 0) {
      return absl::UnavailableError(done == 0 ? "closed" : "closed in the middle of a frame");
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

OwnedFd::~OwnedFd() {
  if (fd_ >= 0) ::close(fd_);
}

OwnedFd& OwnedFd::operator=(OwnedFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.Release();
  }
  return *this;
}

absl::Status SendFrame(int socket, const std::string& bytes, const std::vector<int>& fds) {
  if (fds.size() > static_cast<size_t>(kMaxFrameFds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a frame carries at most ", kMaxFrameFds, " fds, not ", fds.size()));
  }
  if (bytes.size() > UINT32_MAX) return absl::InvalidArgumentError("frame too long");
  std::string wire(kLengthBytes, '\0');
  uint32_t length = static_cast<uint32_t>(bytes.size());
  for (size_t i = 0; i < kLengthBytes; ++i) wire[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  wire += bytes;
  size_t done = 0;
  bool fds_sent = fds.empty();
  while (done < wire.size()) {
    iovec iov{wire.data() + done, wire.size() - done};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFrameFds)] = {};
    if (!fds_sent) {
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    ssize_t n = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Errno("sendmsg");
    }
    fds_sent = true;
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<Frame> ReceiveFrame(int socket, size_t max_bytes, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  Frame frame;
  bool too_many_fds = false;
  char header[kLengthBytes];
  if (absl::Status s = ReadFull(socket, header, kLengthBytes, deadline, &frame.fds, &too_many_fds);
      !s.ok()) {
    return s;
  }
  uint32_t length = 0;
  for (size_t i = 0; i < kLengthBytes; ++i) {
    length |= static_cast<uint32_t>(static_cast<unsigned char>(header[i])) << (8 * i);
  }
  if (length > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a frame of ", length, " bytes; the most is ", max_bytes));
  }
  frame.bytes.resize(length);
  if (absl::Status s =
          ReadFull(socket, frame.bytes.data(), length, deadline, &frame.fds, &too_many_fds);
      !s.ok()) {
    return s;
  }
  if (too_many_fds || frame.fds.size() > static_cast<size_t>(kMaxFrameFds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a frame carries at most ", kMaxFrameFds, " fds"));
  }
  return frame;
}

}  // namespace overlap
