// Length-prefixed frames over a unix stream socket, with file descriptors
// beside them (SCM_RIGHTS): the session socket's transport
// (proto/overlap/v1/session.proto says what a frame holds). A frame is a
// 4-byte little-endian length and that many bytes; the fds ride on the
// sendmsg of its first byte, so a reader gets them with the frame they
// belong to.
//
// Thread safety: one reader and one writer per socket at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace overlap {

// The most fds one frame carries: a register call sends one, an open reply three.
inline constexpr int kMaxFrameFds = 4;

// An fd that closes itself.
class OwnedFd {
 public:
  OwnedFd() = default;
  explicit OwnedFd(int fd) : fd_(fd) {}
  ~OwnedFd();
  OwnedFd(OwnedFd&& other) noexcept : fd_(other.Release()) {}
  OwnedFd& operator=(OwnedFd&& other) noexcept;
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

struct Frame {
  std::string bytes;
  std::vector<OwnedFd> fds;
};

// Sends one frame and `fds` (at most kMaxFrameFds; the caller keeps them).
// UNAVAILABLE when the peer has gone, INVALID_ARGUMENT for too many fds.
absl::Status SendFrame(int socket, const std::string& bytes, const std::vector<int>& fds = {});

// Reads one frame within `timeout`: DEADLINE_EXCEEDED when it does not come,
// UNAVAILABLE when the peer closed (cleanly between frames: the message says
// "closed"), RESOURCE_EXHAUSTED for a frame longer than `max_bytes` (its
// length is read, its body is not, and the fds are closed),
// INVALID_ARGUMENT for more fds than kMaxFrameFds (all closed).
absl::StatusOr<Frame> ReceiveFrame(int socket, size_t max_bytes, absl::Duration timeout);

}  // namespace overlap
