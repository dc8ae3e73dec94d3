#include "server/sessions/rank_channel.h"

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"

namespace overlap::sessions {
namespace {

absl::Status SystemError(const char* call) {
  return absl::ResourceExhaustedError(
      absl::StrCat("session rank: ", call, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SessionRank>> MakeRankChannel(int rank, int device, pid_t pid) {
  auto out = std::make_unique<SessionRank>();
  out->rank = rank;
  out->device = device;
  out->pid = pid;
  out->ring_fd = OwnedFd(::memfd_create("overlapd-session-ring", MFD_CLOEXEC));
  if (!out->ring_fd.valid()) return SystemError("memfd_create");
  if (::ftruncate(out->ring_fd.get(), static_cast<off_t>(kSessionRingBytes)) != 0) {
    return SystemError("ftruncate");
  }
  void* mapped =
      ::mmap(nullptr, kSessionRingBytes, PROT_READ | PROT_WRITE, MAP_SHARED, out->ring_fd.get(), 0);
  if (mapped == MAP_FAILED) return SystemError("mmap");
  // A fresh memfd reads as zeros: every counter starts at 0.
  out->ring = new (mapped) SessionRing;
  out->ring->magic = kSessionRingMagic;
  out->ring->version = kSessionRingVersion;
  // The flags belong to the file, which the client shares: "posted" is read
  // by the daemon's lanes after epoll says so (non-blocking); "completed" is
  // read by the client, which may block on it.
  out->posted_doorbell = OwnedFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  out->completed_doorbell = OwnedFd(::eventfd(0, EFD_CLOEXEC));
  if (!out->posted_doorbell.valid() || !out->completed_doorbell.valid()) {
    ::munmap(mapped, kSessionRingBytes);
    out->ring = nullptr;
    return SystemError("eventfd");
  }
  return out;
}

void ReleaseRank(engine::Engine& engine, SessionRank& rank) {
  for (RankTensors& tensors : rank.tensors) {
    for (engine::BufferId* id : {&tensors.x, &tensors.w, &tensors.y}) {
      if (*id != engine::kNoBuffer) engine.Free(*id);
      *id = engine::kNoBuffer;
    }
  }
  if (rank.signals != engine::kNoBuffer) engine.Free(rank.signals);
  rank.signals = engine::kNoBuffer;
  rank.mapped_bytes = 0;
  if (rank.ring != nullptr) ::munmap(rank.ring, kSessionRingBytes);
  rank.ring = nullptr;
  rank.ring_fd = OwnedFd();
  rank.posted_doorbell = OwnedFd();
  rank.completed_doorbell = OwnedFd();
}

}  // namespace overlap::sessions
