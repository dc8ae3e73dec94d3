// The CUDA engine's SharedMemory between two processes, as a session runs:
// a child process (this binary again, running only SharedMemoryGpuChild)
// makes an exportable cuMemCreate allocation on GPU 0, poisons it and sends
// its fd over a socketpair (SCM_RIGHTS). The parent's engine imports A, B, C
// and two signal words from it and enqueues: wait for inputs_ready, a bf16
// GEMM C = A x B, write outputs_ready. Only then does the child write A and
// B (copies on its stream) and signal inputs_ready; its stream waits for
// outputs_ready and copies C back. C must match a float64 reference in both
// processes: a GEMM that ran before the wait was met would have read NaN.
//
// Needs one GPU that supports POSIX fd handles; skips without one.
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/config.h"
#include "common/dtype.h"
#include "common/unix_frames.h"
#include "gtest/gtest.h"
#include "server/cuda/cuda_engine.h"
#include "server/cuda/driver_api.h"

extern char** environ;

namespace overlap::cuda {
namespace {

using engine::BufferId;
using engine::BufferRef;

// Set in the child's environment to the fd of its end of the socketpair.
constexpr char kChildSocketEnv[] = "OVERLAP_SHARED_MEMORY_CHILD_SOCKET";
constexpr absl::Duration kStepTimeout = absl::Minutes(2);

constexpr int64_t kM = 64, kK = 128, kN = 96;
// The allocation's layout, known to both processes.
constexpr size_t kOffsetA = 0;
constexpr size_t kBytesA = kM * kK * 2;
constexpr size_t kOffsetB = kOffsetA + kBytesA;
constexpr size_t kBytesB = kK * kN * 2;
constexpr size_t kOffsetC = kOffsetB + kBytesB;
constexpr size_t kBytesC = kM * kN * 2;
constexpr size_t kOffsetSignals = (kOffsetC + kBytesC + 255) / 256 * 256;
constexpr size_t kInputsReady = 0, kOutputsReady = 8, kSignalBytes = 16;
constexpr size_t kUsedBytes = kOffsetSignals + kSignalBytes;

// Known bf16 inputs, all different, O(1).
std::vector<uint8_t> InputBytes(int tensor, int64_t count) {
  std::vector<uint8_t> bytes(static_cast<size_t>(count) * 2);
  for (int64_t i = 0; i < count; ++i) {
    const float v = tensor == 0 ? static_cast<float>((i * 37) % 101 - 50) / 64.0f
                                : static_cast<float>((i * 53) % 89 - 44) / 128.0f;
    StoreFromFloat(bytes.data(), DType::kBF16, static_cast<size_t>(i), v);
  }
  return bytes;
}

// max |c - ref| / max |ref| of a bf16 C against float64 on the inputs.
double RelativeError(const uint8_t* c) {
  const std::vector<uint8_t> a = InputBytes(0, kM * kK);
  const std::vector<uint8_t> b = InputBytes(1, kK * kN);
  double max_err = 0, max_ref = 0;
  for (int64_t i = 0; i < kM; ++i) {
    for (int64_t j = 0; j < kN; ++j) {
      double ref = 0;
      for (int64_t p = 0; p < kK; ++p) {
        ref += static_cast<double>(LoadAsFloat(a.data(), DType::kBF16, i * kK + p)) *
               LoadAsFloat(b.data(), DType::kBF16, p * kN + j);
      }
      const double got = LoadAsFloat(c, DType::kBF16, i * kN + j);
      if (!std::isfinite(got)) return INFINITY;
      max_err = std::max(max_err, std::fabs(got - ref));
      max_ref = std::max(max_ref, std::fabs(ref));
    }
  }
  return max_err / std::max(max_ref, 1e-30);
}

// --- The child: the client process that owns the memory. ---

// Every step of the child; an error string goes to the parent as "error: ...".
std::string RunChild(int socket) {
  auto cuda = [](cudaError_t e, const char* what) -> std::string {
    return e == cudaSuccess ? "" : absl::StrCat(what, ": ", cudaGetErrorName(e));
  };
  auto drv = [](CUresult r, const char* what) -> std::string {
    return r == CUDA_SUCCESS ? "" : absl::StrCat(what, ": CUresult ", static_cast<int>(r));
  };
#define CHILD_CHECK(expr)               \
  do {                                  \
    const std::string failed = (expr);  \
    if (!failed.empty()) return failed; \
  } while (0)
  CHILD_CHECK(cuda(cudaSetDevice(0), "cudaSetDevice"));
  absl::StatusOr<const DriverApi*> api = Driver();
  if (!api.ok()) return std::string(api.status().message());
  const DriverApi* cu = *api;
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  CHILD_CHECK(
      drv(cu->MemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
          "cuMemGetAllocationGranularity"));
  // A granule more than the layout needs: the parent maps only what it uses.
  const size_t size = (kUsedBytes + granularity - 1) / granularity * granularity + granularity;
  CUmemGenericAllocationHandle handle = 0;
  const CUresult created = cu->MemCreate(&handle, size, &prop, 0);
  if (created == CUDA_ERROR_NOT_SUPPORTED) {
    SendFrame(socket, "skip: GPU 0 cannot export memory as a POSIX fd").IgnoreError();
    return "";
  }
  CHILD_CHECK(drv(created, "cuMemCreate"));
  CUdeviceptr base = 0;
  CHILD_CHECK(drv(cu->MemAddressReserve(&base, size, granularity, 0, 0), "cuMemAddressReserve"));
  CHILD_CHECK(drv(cu->MemMap(base, size, 0, handle, 0), "cuMemMap"));
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHILD_CHECK(drv(cu->MemSetAccess(base, size, &access, 1), "cuMemSetAccess"));
  char* ptr = reinterpret_cast<char*>(static_cast<uintptr_t>(base));
  // NaN everywhere (bf16 0xFFFF) until the inputs are written; signals 0.
  CHILD_CHECK(cuda(cudaMemset(ptr, 0xFF, kOffsetSignals), "cudaMemset"));
  CHILD_CHECK(cuda(cudaMemset(ptr + kOffsetSignals, 0, kSignalBytes), "cudaMemset"));
  CHILD_CHECK(cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize"));
  int fd = -1;
  CHILD_CHECK(
      drv(cu->MemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
          "cuMemExportToShareableHandle"));
  OwnedFd exported(fd);
  absl::Status sent = SendFrame(socket, "ready", {exported.get()});
  if (!sent.ok()) return std::string(sent.message());

  absl::StatusOr<Frame> go = ReceiveFrame(socket, 64, kStepTimeout);
  if (!go.ok() || go->bytes != "go") return "no go from the parent";
  cudaStream_t stream;
  CHILD_CHECK(cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream"));
  const std::vector<uint8_t> a = InputBytes(0, kM * kK);
  const std::vector<uint8_t> b = InputBytes(1, kK * kN);
  std::vector<uint8_t> c(kBytesC);
  CHILD_CHECK(
      cuda(cudaMemcpyAsync(ptr + kOffsetA, a.data(), kBytesA, cudaMemcpyHostToDevice, stream),
           "copy A"));
  CHILD_CHECK(
      cuda(cudaMemcpyAsync(ptr + kOffsetB, b.data(), kBytesB, cudaMemcpyHostToDevice, stream),
           "copy B"));
  CHILD_CHECK(drv(cu->StreamWriteValue64(stream, base + kOffsetSignals + kInputsReady, 1,
                                         CU_STREAM_WRITE_VALUE_DEFAULT),
                  "cuStreamWriteValue64"));
  CHILD_CHECK(drv(cu->StreamWaitValue64(stream, base + kOffsetSignals + kOutputsReady, 1,
                                        CU_STREAM_WAIT_VALUE_GEQ),
                  "cuStreamWaitValue64"));
  CHILD_CHECK(
      cuda(cudaMemcpyAsync(c.data(), ptr + kOffsetC, kBytesC, cudaMemcpyDeviceToHost, stream),
           "copy C"));
  CHILD_CHECK(cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
  sent = SendFrame(socket, std::string(c.begin(), c.end()));
  if (!sent.ok()) return std::string(sent.message());
  // The parent unmaps before the child releases: wait for its word.
  (void)ReceiveFrame(socket, 64, kStepTimeout);
  cudaStreamDestroy(stream);
  cu->MemUnmap(base, size);
  cu->MemAddressFree(base, size);
  cu->MemRelease(handle);
  return "";
#undef CHILD_CHECK
}

TEST(SharedMemoryGpuChild, ExportsSignalsAndReads) {
  const char* socket = std::getenv(kChildSocketEnv);
  if (socket == nullptr) GTEST_SKIP() << "runs only as the child of SharedMemoryGpuTest";
  const int fd = std::atoi(socket);
  const std::string error = RunChild(fd);
  if (!error.empty()) SendFrame(fd, "error: " + error).IgnoreError();
  EXPECT_EQ(error, "");
}

// --- The parent: the daemon's side. ---

// The child process; killed and reaped if the test ends early.
class Child {
 public:
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // Starts this binary as the child, with `socket` inherited.
  bool Start(int socket) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
    env_strings.push_back(absl::StrCat(kChildSocketEnv, "=", socket));
    std::vector<char*> envp;
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string self = "/proc/self/exe";
    std::string filter = "--gtest_filter=SharedMemoryGpuChild.*";
    char* argv[] = {self.data(), filter.data(), nullptr};
    pid_ = fork();
    if (pid_ == 0) {
      execve("/proc/self/exe", argv, envp.data());
      _exit(127);
    }
    return pid_ > 0;
  }
  // The child's exit status once it ends, -1 if it was killed or failed.
  int Wait() {
    int status = 0;
    if (waitpid(pid_, &status, 0) != pid_) return -1;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
};

TEST(SharedMemoryGpuTest, AGemmReadsAndWritesAnotherProcessesMemoryInSignalOrder) {
  DaemonConfig config;
  config.pool_bytes_per_device = int64_t{256} << 20;
  config.gemm_workspace_bytes = int64_t{8} << 20;
  config.collective_timeout_s = 120;
  absl::StatusOr<std::unique_ptr<CudaEngine>> created = CreateCudaEngineTyped(config);
  if (!created.ok() && created.status().code() == absl::StatusCode::kUnavailable) {
    GTEST_SKIP() << created.status().message();
  }
  ASSERT_TRUE(created.ok()) << created.status();
  CudaEngine& engine = **created;
  engine::SharedMemory* shared = engine.Shared();
  ASSERT_NE(shared, nullptr);

  int sockets[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sockets), 0);
  OwnedFd mine(sockets[0]), theirs(sockets[1]);
  ASSERT_EQ(fcntl(mine.get(), F_SETFD, FD_CLOEXEC), 0);
  Child child;
  ASSERT_TRUE(child.Start(theirs.get()));
  theirs = OwnedFd();

  absl::StatusOr<Frame> ready = ReceiveFrame(mine.get(), 1 << 16, kStepTimeout);
  ASSERT_TRUE(ready.ok()) << ready.status();
  if (ready->bytes.rfind("skip:", 0) == 0) GTEST_SKIP() << ready->bytes;
  ASSERT_EQ(ready->bytes, "ready");
  ASSERT_EQ(ready->fds.size(), 1u);
  const int fd = ready->fds[0].get();

  // A refusal first: the socket is no CUDA allocation.
  EXPECT_EQ(shared->ImportBuffer(0, mine.get(), 0, 8).status().code(),
            absl::StatusCode::kInvalidArgument);

  std::vector<BufferId> imported;
  auto import = [&](size_t offset, size_t bytes) {
    absl::StatusOr<BufferId> id = shared->ImportBuffer(0, fd, offset, bytes);
    EXPECT_TRUE(id.ok()) << id.status();
    if (id.ok()) imported.push_back(*id);
    return id.value_or(engine::kNoBuffer);
  };
  const BufferId a = import(kOffsetA, kBytesA);
  const BufferId b = import(kOffsetB, kBytesB);
  const BufferId c = import(kOffsetC, kBytesC);
  const BufferId signals = import(kOffsetSignals, kSignalBytes);
  ASSERT_EQ(imported.size(), 4u);
  ready->fds.clear();  // the engine keeps its own references

  const engine::StreamId stream = engine.GetStream(0, engine::StreamRole::kCompute);
  const BufferRef inputs_ready{signals, kInputsReady, 8};
  const BufferRef outputs_ready{signals, kOutputsReady, 8};
  // The first GEMM of a shape is tuned, and tuning waits for the device to be
  // idle: run the shape once before a stream waits for the other process.
  {
    std::vector<BufferId> scratch;
    for (size_t bytes : {kBytesA, kBytesB, kBytesC}) {
      absl::StatusOr<BufferId> id = engine.Allocate(0, bytes);
      ASSERT_TRUE(id.ok()) << id.status();
      scratch.push_back(*id);
      ASSERT_TRUE(engine.FillConstant(stream, BufferRef{*id, 0, bytes}, DType::kBF16, 1.0f).ok());
    }
    engine::GemmArgs warm;
    warm.dtype = DType::kBF16;
    warm.m = kM;
    warm.n = kN;
    warm.k = kK;
    warm.a = engine::MatrixRef{scratch[0], 0, kK};
    warm.b = engine::MatrixRef{scratch[1], 0, kN};
    warm.c = engine::MatrixRef{scratch[2], 0, kN};
    const absl::Status gemm = engine.Gemm(stream, warm);
    ASSERT_TRUE(gemm.ok()) << gemm;
    ASSERT_TRUE(engine.Synchronize({0}).ok());
    for (BufferId id : scratch) engine.Free(id);
  }
  ASSERT_TRUE(shared->WaitValue(stream, inputs_ready, 1, absl::Now() + kStepTimeout).ok());
  // CUDA cannot time the wait out: if the test ends before the child signals,
  // another stream writes the word so that ours (and the engine's teardown)
  // goes on, and the imports are released.
  struct Release {
    CudaEngine& engine;
    engine::SharedMemory& shared;
    BufferRef word;
    std::vector<BufferId>& imported;
    bool signalled = false;
    ~Release() {
      if (!signalled) {
        shared.WriteValue(engine.GetStream(0, engine::StreamRole::kComm), word, 1).IgnoreError();
      }
      engine.Synchronize({0}).IgnoreError();
      for (BufferId id : imported) engine.Free(id);
    }
  } release{engine, *shared, inputs_ready, imported};
  engine::GemmArgs g;
  g.dtype = DType::kBF16;
  g.m = kM;
  g.n = kN;
  g.k = kK;
  g.a = engine::MatrixRef{a, 0, kK};
  g.b = engine::MatrixRef{b, 0, kN};
  g.c = engine::MatrixRef{c, 0, kN};
  const absl::Status gemm = engine.Gemm(stream, g);
  ASSERT_TRUE(gemm.ok()) << gemm;
  ASSERT_TRUE(shared->WriteValue(stream, outputs_ready, 1).ok());

  ASSERT_TRUE(SendFrame(mine.get(), "go").ok());
  absl::StatusOr<Frame> child_c = ReceiveFrame(mine.get(), 1 << 20, kStepTimeout);
  ASSERT_TRUE(child_c.ok()) << child_c.status();
  ASSERT_EQ(child_c->bytes.size(), kBytesC) << "the child: " << child_c->bytes.substr(0, 200);
  release.signalled = true;  // the child wrote inputs_ready
  ASSERT_TRUE(engine.Synchronize({0}).ok());

  std::vector<uint8_t> ours(kBytesC);
  ASSERT_TRUE(engine.CopyToHost(ours.data(), BufferRef{c, 0, kBytesC}, 0).ok());
  const double error = RelativeError(ours.data());
  EXPECT_LT(error, 1e-2) << "the parent's C";
  EXPECT_EQ(std::memcmp(ours.data(), child_c->bytes.data(), kBytesC), 0)
      << "the child read another C than the GEMM wrote";
  // The child keeps its allocation until we are done with it.
  ASSERT_TRUE(SendFrame(mine.get(), "done").ok());
  EXPECT_EQ(child.Wait(), 0);
}

}  // namespace
}  // namespace overlap::cuda
