// The host engine's SharedMemory (shared_memory.h): another process's memfd
// (or shared regular file) mapped as a buffer, and signal words waited for and
// written by stream tasks.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/engine/host/host_engine_impl.h"

namespace overlap::engine::host {
namespace {

// How long a waiting stream sleeps between two looks at its word: short
// against an op's time, long enough not to keep a core busy.
constexpr std::chrono::microseconds kSignalPollInterval{25};

std::string FileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a pipe";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  return "not a regular file (an eventfd, a timerfd, ...)";
}

}  // namespace

void StorageDeleter::operator()(uint8_t* data) const noexcept {
  if (!mapped) {
    delete[] data;
    return;
  }
  if (munmap(data - map_offset, map_bytes) != 0) {
    GetLogger("engine")->warn("host engine: munmap of an imported buffer: {}",
                              std::strerror(errno));
  }
}

absl::StatusOr<BufferId> HostEngine::ImportBuffer(int device, int fd, size_t offset, size_t bytes) {
  RETURN_IF_ERROR(CheckDevice(device, "ImportBuffer"));
  if (bytes == 0) return absl::InvalidArgumentError("ImportBuffer: 0 bytes to map");
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ImportBuffer: fd ", fd, ": fstat: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ImportBuffer: fd ", fd, " is ", FileKind(st.st_mode),
                     ", not shared memory: pass a memfd (memfd_create) or a shared regular file"));
  }
  if (bytes > SIZE_MAX - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("ImportBuffer: offset ", offset, " + ", bytes, " bytes overflows 64 bits"));
  }
  const size_t end = offset + bytes;
  if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) < end) {
    return absl::InvalidArgumentError(absl::StrCat("ImportBuffer: fd ", fd, " holds ", st.st_size,
                                                   " bytes, fewer than offset ", offset, " + ",
                                                   bytes, " bytes"));
  }
  // A client that shrank its memfd under a live mapping would kill the daemon
  // with SIGBUS: seal it against shrinking where the memfd allows sealing
  // (the client never needs to shrink memory it shares).
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0 && errno != EINVAL && errno != EPERM) {
    GetLogger("engine")->warn("host engine: ImportBuffer: sealing fd {}: {}", fd,
                              std::strerror(errno));
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t map_start = offset / page * page;
  const size_t map_offset = offset - map_start;
  const size_t map_bytes = map_offset + bytes;
  void* base = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                    static_cast<off_t>(map_start));
  if (base == MAP_FAILED) {
    const int error = errno;
    const std::string message = absl::StrCat("ImportBuffer: mapping ", bytes, " bytes of fd ", fd,
                                             " at offset ", offset, ": ", std::strerror(error));
    if (error == ENOMEM) return absl::ResourceExhaustedError(message);
    // EACCES: opened read-only; EPERM: sealed against writes.
    return absl::InvalidArgumentError(
        absl::StrCat(message, " (the fd must be open for reading and writing)"));
  }
  auto storage = std::make_shared<Storage>();
  storage->data = std::unique_ptr<uint8_t[], StorageDeleter>(
      static_cast<uint8_t*>(base) + map_offset, StorageDeleter{true, map_offset, map_bytes});
  absl::MutexLock lock(&mu_);
  absl::Status result;
  // Only a sticky failure stops it: importing is not an injectable op.
  if (!PassFailurePoint("import_buffer", {}, &result)) return result;
  const BufferId id = next_buffer_++;
  buffers_[id] = Buffer{device, bytes, std::move(storage), /*imported=*/true};
  return id;
}

absl::Status HostEngine::EnqueueSignal(StreamId stream, const BufferRef& word, const char* op,
                                       bool write,
                                       std::function<void(int device, uint64_t* word)> task) {
  ASSIGN_OR_RETURN(const Stream* s, FindStream(stream, op));
  if (word.bytes != sizeof(uint64_t)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": a signal word is 8 bytes, got ", word.bytes));
  }
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Range range, Resolve(word, s->device, absl::StrCat(op, " word")));
  if (!buffers_.at(word.buffer).imported) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": buffer ", word.buffer,
                     " was not imported (ImportBuffer): a signal word lives in "
                     "memory both processes map"));
  }
  if (reinterpret_cast<uintptr_t>(range.data()) % alignof(uint64_t) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": the word at offset ", word.offset,
                                                   " of buffer ", word.buffer,
                                                   " is not 8-byte aligned in memory"));
  }
  absl::Status result;
  if (!PassFailurePoint(op, {stream}, &result)) return result;
  const Access access{word.buffer, Region::Contiguous(word.offset, word.bytes), write, stream};
  RETURN_IF_ERROR(CheckHazards({stream}, {&access, 1}, op));
  s->worker->Enqueue([range, device = s->device, task = std::move(task)] {
    task(device, reinterpret_cast<uint64_t*>(range.data()));
  });
  return absl::OkStatus();
}

absl::Status HostEngine::WaitValue(StreamId stream, BufferRef word, uint64_t value,
                                   absl::Time deadline) {
  return EnqueueSignal(
      stream, word, "wait_value", /*write=*/false,
      [this, buffer = word.buffer, offset = word.offset, value, deadline](int device, uint64_t* p) {
        for (;;) {
          const uint64_t seen = __atomic_load_n(p, __ATOMIC_ACQUIRE);
          if (seen >= value) return;
          if (absl::Now() >= deadline) {
            RecordError(device, absl::DeadlineExceededError(absl::StrCat(
                                    "signal word at offset ", offset, " of buffer ", buffer,
                                    " not signalled by ", absl::FormatTime(deadline), ": it holds ",
                                    seen, ", the stream waited for >= ", value)));
            return;
          }
          std::this_thread::sleep_for(kSignalPollInterval);
        }
      });
}

absl::Status HostEngine::WriteValue(StreamId stream, BufferRef word, uint64_t value) {
  // A stream runs its tasks in order on one thread: the release store orders
  // every write of the tasks before it.
  return EnqueueSignal(stream, word, "write_value", /*write=*/true,
                       [value](int, uint64_t* p) { __atomic_store_n(p, value, __ATOMIC_RELEASE); });
}

}  // namespace overlap::engine::host
