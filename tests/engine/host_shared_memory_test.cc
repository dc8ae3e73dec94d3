// The host engine's SharedMemory: a memfd imported as a buffer is the same
// bytes the test maps itself, fds that are not shared memory are refused,
// Free unmaps, and signal words order a stream after another thread's write.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/unix_frames.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/engine.h"
#include "tests/engine/host_test_util.h"

namespace overlap::engine {
namespace {

using ::testing::HasSubstr;
using testing::MakeHostEngine;

// A memfd of `bytes` whose name is unique to the test, so that /proc/self/maps
// shows whether it is mapped.
OwnedFd MakeMemfd(const std::string& name, size_t bytes) {
  OwnedFd fd(memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  EXPECT_TRUE(fd.valid()) << std::strerror(errno);
  EXPECT_EQ(ftruncate(fd.get(), static_cast<off_t>(bytes)), 0) << std::strerror(errno);
  return fd;
}

// The test's own view of a memfd, as the client process would map it.
class Mapping {
 public:
  Mapping(int fd, size_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    EXPECT_NE(p, MAP_FAILED) << std::strerror(errno);
    data_ = static_cast<uint8_t*>(p);
  }
  ~Mapping() { munmap(data_, bytes_); }
  uint8_t* data() const { return data_; }
  uint64_t* word(size_t offset) const { return reinterpret_cast<uint64_t*>(data_ + offset); }

 private:
  size_t bytes_;
  uint8_t* data_;
};

int MappingsOf(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/memfd:" + name) != std::string::npos) ++count;
  }
  return count;
}

class HostSharedMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = MakeHostEngine(/*devices=*/2);
    shared_ = engine_->Shared();
    ASSERT_NE(shared_, nullptr);
  }

  std::unique_ptr<Engine> engine_;
  SharedMemory* shared_ = nullptr;
};

TEST_F(HostSharedMemoryTest, AnImportedMemfdIsTheClientsBytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t file_bytes = 3 * page;
  OwnedFd fd = MakeMemfd("import_bytes", file_bytes);
  Mapping client(fd.get(), file_bytes);
  // Not page-aligned: the engine maps from the page below.
  const size_t offset = page + 100;
  const size_t bytes = 1000;
  for (size_t i = 0; i < file_bytes; ++i) client.data()[i] = static_cast<uint8_t>(i * 7 + 3);

  absl::StatusOr<BufferId> buffer = shared_->ImportBuffer(1, fd.get(), offset, bytes);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  fd = OwnedFd();                                    // the engine keeps nothing of the fd
  EXPECT_EQ(engine_->Monitor()->MemoryInUse(1), 0);  // the client's memory, not the device's

  std::vector<uint8_t> seen(bytes);
  ASSERT_TRUE(engine_->CopyToHost(seen.data(), BufferRef{*buffer, 0, bytes}, 1).ok());
  EXPECT_EQ(std::memcmp(seen.data(), client.data() + offset, bytes), 0);

  std::vector<uint8_t> written(bytes);
  for (size_t i = 0; i < bytes; ++i) written[i] = static_cast<uint8_t>(255 - i % 251);
  ASSERT_TRUE(engine_->CopyFromHost(BufferRef{*buffer, 0, bytes}, 1, written.data()).ok());
  EXPECT_EQ(std::memcmp(client.data() + offset, written.data(), bytes), 0);
  // Bytes outside the range are untouched.
  EXPECT_EQ(client.data()[offset - 1], static_cast<uint8_t>((offset - 1) * 7 + 3));
  EXPECT_EQ(client.data()[offset + bytes], static_cast<uint8_t>((offset + bytes) * 7 + 3));

  // Ranges are checked against the imported size, and the device is the one given.
  std::vector<uint8_t> more(bytes + 1);
  EXPECT_EQ(engine_->CopyToHost(more.data(), BufferRef{*buffer, 0, bytes + 1}, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->CopyToHost(seen.data(), BufferRef{*buffer, 0, bytes}, 0).code(),
            absl::StatusCode::kInvalidArgument);
  engine_->Free(*buffer);
}

TEST_F(HostSharedMemoryTest, AGemmReadsAndWritesImportedBuffers) {
  // C[2x2] = A[2x3] x B[3x2], fp32, all three in one memfd.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  OwnedFd fd = MakeMemfd("import_gemm", 3 * page);
  Mapping client(fd.get(), 3 * page);
  const float a[] = {1, 2, 3, 4, 5, 6};
  const float b[] = {7, 8, 9, 10, 11, 12};
  std::memcpy(client.data(), a, sizeof(a));
  std::memcpy(client.data() + page, b, sizeof(b));
  auto ia = shared_->ImportBuffer(0, fd.get(), 0, sizeof(a));
  auto ib = shared_->ImportBuffer(0, fd.get(), page, sizeof(b));
  auto ic = shared_->ImportBuffer(0, fd.get(), 2 * page, 4 * sizeof(float));
  ASSERT_TRUE(ia.ok() && ib.ok() && ic.ok());
  GemmArgs g;
  g.dtype = DType::kF32;
  g.m = 2;
  g.n = 2;
  g.k = 3;
  g.a = MatrixRef{*ia, 0, 3};
  g.b = MatrixRef{*ib, 0, 2};
  g.c = MatrixRef{*ic, 0, 2};
  ASSERT_TRUE(engine_->Gemm(engine_->GetStream(0, StreamRole::kCompute), g).ok());
  ASSERT_TRUE(engine_->Synchronize({0}).ok());
  float c[4];
  std::memcpy(c, client.data() + 2 * page, sizeof(c));
  EXPECT_EQ(c[0], 1 * 7 + 2 * 9 + 3 * 11);
  EXPECT_EQ(c[1], 1 * 8 + 2 * 10 + 3 * 12);
  EXPECT_EQ(c[2], 4 * 7 + 5 * 9 + 6 * 11);
  EXPECT_EQ(c[3], 4 * 8 + 5 * 10 + 6 * 12);
  for (auto id : {*ia, *ib, *ic}) engine_->Free(id);
}

TEST_F(HostSharedMemoryTest, RefusesWhatIsNotSharedMemory) {
  auto refused = [&](int fd, size_t offset, size_t bytes) -> std::string {
    absl::StatusOr<BufferId> buffer = shared_->ImportBuffer(0, fd, offset, bytes);
    EXPECT_EQ(buffer.status().code(), absl::StatusCode::kInvalidArgument) << buffer.status();
    return std::string(buffer.status().message());
  };
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  OwnedFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  EXPECT_THAT(refused(read_end.get(), 0, 8), HasSubstr("pipe"));

  OwnedFd event(eventfd(0, EFD_CLOEXEC));
  ASSERT_TRUE(event.valid());
  EXPECT_THAT(refused(event.get(), 0, 8), HasSubstr("not shared memory"));

  int sockets[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sockets), 0);
  OwnedFd left(sockets[0]), right(sockets[1]);
  EXPECT_THAT(refused(left.get(), 0, 8), HasSubstr("socket"));

  OwnedFd dev_zero(open("/dev/zero", O_RDWR | O_CLOEXEC));
  ASSERT_TRUE(dev_zero.valid());
  EXPECT_THAT(refused(dev_zero.get(), 0, 8), HasSubstr("character device"));

  OwnedFd memfd = MakeMemfd("import_refused", 4096);
  EXPECT_THAT(refused(memfd.get(), 0, 8192), HasSubstr("fewer than"));     // too small
  EXPECT_THAT(refused(memfd.get(), 0, 0), HasSubstr("0 bytes"));           // nothing
  EXPECT_THAT(refused(memfd.get(), 4096, 1), HasSubstr("fewer than"));     // offset at the end
  EXPECT_THAT(refused(memfd.get(), 1 << 20, 8), HasSubstr("fewer than"));  // beyond
  EXPECT_THAT(refused(memfd.get(), SIZE_MAX - 3, 8), HasSubstr("overflows"));
  EXPECT_THAT(refused(-1, 0, 8), HasSubstr("fstat"));

  // A read-only fd cannot be mapped for writing.
  const std::string path = "/proc/self/fd/" + std::to_string(memfd.get());
  OwnedFd read_only(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(read_only.valid());
  refused(read_only.get(), 0, 8);

  EXPECT_EQ(shared_->ImportBuffer(7, memfd.get(), 0, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->Monitor()->MemoryInUse(0), 0);
}

TEST_F(HostSharedMemoryTest, FreeUnmapsAndTheClientsMemoryStays) {
  const std::string name = "import_free_unmaps";
  OwnedFd fd = MakeMemfd(name, 4096);
  absl::StatusOr<BufferId> buffer = shared_->ImportBuffer(0, fd.get(), 64, 256);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ(MappingsOf(name), 1);
  ASSERT_TRUE(engine_
                  ->FillConstant(engine_->GetStream(0, StreamRole::kCompute),
                                 BufferRef{*buffer, 0, 256}, DType::kF32, 2.5f)
                  .ok());
  engine_->Free(*buffer);  // after the queued fill
  EXPECT_EQ(MappingsOf(name), 0);
  std::vector<uint8_t> unused(8);
  EXPECT_EQ(engine_->CopyToHost(unused.data(), BufferRef{*buffer, 0, 8}, 0).code(),
            absl::StatusCode::kInvalidArgument);

  float values[64];
  ASSERT_EQ(pread(fd.get(), values, sizeof(values), 64), static_cast<ssize_t>(sizeof(values)));
  for (float v : values) EXPECT_EQ(v, 2.5f);
  // A memfd that allows sealing is sealed against shrinking under the mapping.
  EXPECT_NE(fcntl(fd.get(), F_GET_SEALS) & F_SEAL_SHRINK, 0);
}

class HostSignalTest : public HostSharedMemoryTest {
 protected:
  void SetUp() override {
    HostSharedMemoryTest::SetUp();
    fd_ = MakeMemfd("signals", 4096);
    client_ = std::make_unique<Mapping>(fd_.get(), 4096);
    absl::StatusOr<BufferId> words = shared_->ImportBuffer(1, fd_.get(), 0, 16);
    ASSERT_TRUE(words.ok()) << words.status();
    words_ = *words;
    stream_ = engine_->GetStream(1, StreamRole::kCompute);
  }
  void TearDown() override { engine_->Free(words_); }

  BufferRef Word(size_t offset) const { return BufferRef{words_, offset, 8}; }

  OwnedFd fd_;
  std::unique_ptr<Mapping> client_;
  BufferId words_ = kNoBuffer;
  StreamId stream_ = 0;
};

TEST_F(HostSignalTest, AWaitPassesOnceAnotherThreadWritesTheWord) {
  ASSERT_TRUE(shared_->WaitValue(stream_, Word(0), 5, absl::Now() + absl::Minutes(2)).ok());
  absl::StatusOr<EventId> after = engine_->CreateEvent(1);
  ASSERT_TRUE(after.ok());
  ASSERT_TRUE(engine_->RecordEvent(*after, stream_).ok());
  // Nothing wrote the word: the stream cannot have passed the wait.
  EXPECT_FALSE(*engine_->EventDone(*after));

  std::thread writer([word = client_->word(0)] { __atomic_store_n(word, 3, __ATOMIC_RELEASE); });
  writer.join();
  EXPECT_FALSE(*engine_->EventDone(*after));  // 3 < 5

  std::thread releaser([word = client_->word(0)] { __atomic_store_n(word, 6, __ATOMIC_RELEASE); });
  EXPECT_TRUE(engine_->Synchronize({1}).ok());
  releaser.join();
  EXPECT_TRUE(*engine_->EventDone(*after));
  engine_->DestroyEvent(*after);
}

TEST_F(HostSignalTest, AWaitNeverSignalledFailsTheStreamAtItsDeadline) {
  ASSERT_TRUE(shared_->WaitValue(stream_, Word(0), 1, absl::Now() + absl::Milliseconds(50)).ok());
  const absl::Status status = engine_->Synchronize({1});
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(status.message(), HasSubstr("not signalled by"));
  // The error was reported once; the device goes on.
  EXPECT_TRUE(engine_->Synchronize({1}).ok());
}

TEST_F(HostSignalTest, AWrittenValueIsVisibleAfterSynchronize) {
  ASSERT_TRUE(shared_->WriteValue(stream_, Word(8), 42).ok());
  ASSERT_TRUE(engine_->Synchronize({1}).ok());
  EXPECT_EQ(__atomic_load_n(client_->word(8), __ATOMIC_ACQUIRE), 42u);
  // A wait on a word already at its value passes at once.
  ASSERT_TRUE(shared_->WaitValue(stream_, Word(8), 42, absl::Now() + absl::Minutes(1)).ok());
  EXPECT_TRUE(engine_->Synchronize({1}).ok());
}

TEST_F(HostSignalTest, RefusesWordsThatAreNotSignalWords) {
  const absl::Time deadline = absl::Now() + absl::Minutes(1);
  auto code = [](const absl::Status& status) { return status.code(); };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code(shared_->WriteValue(stream_, BufferRef{words_, 0, 4}, 1)), kInvalid);
  EXPECT_EQ(code(shared_->WriteValue(stream_, BufferRef{words_, 4, 8}, 1)), kInvalid);  // unaligned
  EXPECT_EQ(code(shared_->WriteValue(stream_, BufferRef{words_, 16, 8}, 1)), kInvalid);  // past end
  EXPECT_EQ(
      code(shared_->WaitValue(engine_->GetStream(0, StreamRole::kCompute), Word(0), 1, deadline)),
      kInvalid);  // another device's stream
  EXPECT_EQ(code(shared_->WaitValue(9999, Word(0), 1, deadline)), kInvalid);
  absl::StatusOr<BufferId> own = engine_->Allocate(1, 16);
  ASSERT_TRUE(own.ok());
  EXPECT_THAT(shared_->WriteValue(stream_, BufferRef{*own, 0, 8}, 1).message(),
              HasSubstr("not imported"));
  engine_->Free(*own);
  EXPECT_TRUE(engine_->Synchronize({1}).ok());
  EXPECT_EQ(__atomic_load_n(client_->word(0), __ATOMIC_ACQUIRE), 0u);
}

}  // namespace
}  // namespace overlap::engine
