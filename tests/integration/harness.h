// Test harness for the integration tests: runs the real overlapd and overlapctl
// binaries as child processes in a private temporary directory. Header-only
// (tests are one executable per *_test.cc). Not thread-safe.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace overlap::testing {

using Clock = std::chrono::steady_clock;

inline std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

inline void WriteFileOrDie(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// A directory under /tmp (short: unix socket paths are limited to 107 bytes),
// removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/ovl-it-XXXXXX";
    const char* made = mkdtemp(pattern);
    if (made != nullptr) path_ = made;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct RunResult {
  int exit_code = -1;  // -1: killed by a signal or timed out
  bool timed_out = false;
  std::string out;
  std::string err;
};

// A child process whose stdout and stderr go to files (no pipe can fill up).
class Child {
 public:
  // `env` entries ("NAME=value") are added to the inherited environment.
  // `stdin_path` empty means /dev/null. Output files are written under `dir`.
  static std::unique_ptr<Child> Spawn(const std::vector<std::string>& argv, const std::string& dir,
                                      const std::vector<std::string>& env = {},
                                      const std::string& stdin_path = "") {
    static int counter = 0;
    auto child = std::unique_ptr<Child>(new Child());
    const std::string base =
        dir + "/proc-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
    child->out_path_ = base + ".out";
    child->err_path_ = base + ".err";
    child->pid_ = fork();
    if (child->pid_ == 0) {
      const int in = open(stdin_path.empty() ? "/dev/null" : stdin_path.c_str(), O_RDONLY);
      const int out = open(child->out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err = open(child->err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (in < 0 || out < 0 || err < 0) _exit(125);
      dup2(in, 0);
      dup2(out, 1);
      dup2(err, 2);
      for (const std::string& entry : env) putenv(strdup(entry.c_str()));
      std::vector<char*> args;
      for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    return child;
  }

  ~Child() {
    if (running()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  pid_t pid() const { return pid_; }
  const std::string& out_path() const { return out_path_; }
  const std::string& err_path() const { return err_path_; }
  bool running() const { return pid_ > 0 && !status_.has_value(); }

  void Signal(int signal) {
    if (running()) kill(pid_, signal);
  }

  // Waits up to `timeout` for the child to exit; on timeout kills it (when
  // `kill_on_timeout`) and reports timed_out.
  RunResult Wait(std::chrono::milliseconds timeout, bool kill_on_timeout = true) {
    const auto deadline = Clock::now() + timeout;
    bool timed_out = false;
    while (running()) {
      int status = 0;
      const pid_t done = waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        status_ = status;
        break;
      }
      if (Clock::now() >= deadline) {
        timed_out = true;
        if (!kill_on_timeout) break;
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        status_ = status;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    RunResult result;
    result.timed_out = timed_out;
    if (status_.has_value() && WIFEXITED(*status_) && !timed_out) {
      result.exit_code = WEXITSTATUS(*status_);
    }
    result.out = ReadFileOrEmpty(out_path_);
    result.err = ReadFileOrEmpty(err_path_);
    return result;
  }

  // True when the process exited on its own with `signal`-free status.
  std::optional<int> ExitSignal() const {
    if (status_.has_value() && WIFSIGNALED(*status_)) return WTERMSIG(*status_);
    return std::nullopt;
  }

 private:
  Child() = default;
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::string out_path_;
  std::string err_path_;
};

inline std::string Describe(const RunResult& r) {
  return "exit " + std::to_string(r.exit_code) + (r.timed_out ? " (timed out)" : "") +
         "\n--- stdout ---\n" + r.out + "--- stderr ---\n" + r.err;
}

// Runs overlapctl against `address` (empty: no --addr) and waits for it.
inline RunResult Overlapctl(const std::string& dir, const std::string& address,
                            const std::vector<std::string>& args,
                            std::chrono::milliseconds timeout = std::chrono::seconds(60),
                            const std::vector<std::string>& env = {},
                            const std::string& stdin_path = "") {
  std::vector<std::string> argv = {OVERLAPCTL_BIN};
  if (!address.empty()) {
    argv.push_back("--addr");
    argv.push_back(address);
  }
  argv.insert(argv.end(), args.begin(), args.end());
  return Child::Spawn(argv, dir, env, stdin_path)->Wait(timeout);
}

// The real overlapd on a host backend with 4 devices and hazard checks, on a
// unix socket and state dir inside `dir`.
class Daemon {
 public:
  Daemon(const std::string& dir, std::vector<std::string> extra_flags = {})
      : dir_(dir), extra_flags_(std::move(extra_flags)) {
    address_ = "unix:" + dir_ + "/s.sock";
    state_dir_ = dir_ + "/state";
  }
  ~Daemon() { Kill(); }

  const std::string& address() const { return address_; }
  const std::string& state_dir() const { return state_dir_; }
  // Before Start: listen on `address` (e.g. 127.0.0.1:PORT) instead of the
  // socket in `dir`, and pass `flags` (e.g. --tls-ca) to every Ctl call.
  void set_address(std::string address) { address_ = std::move(address); }
  void set_ctl_flags(std::vector<std::string> flags) { ctl_flags_ = std::move(flags); }
  // Before Start: run overlapd through this command (e.g. setpriv, or a shell
  // that sets a umask first), given the daemon's argv after it.
  void set_launcher(std::vector<std::string> launcher) { launcher_ = std::move(launcher); }
  // What the daemon printed so far (its log goes to stderr).
  std::string Log() const {
    return child_ ? ReadFileOrEmpty(child_->err_path()) + ReadFileOrEmpty(child_->out_path()) : "";
  }

  // Starts the daemon and waits until `overlapctl node` answers.
  ::testing::AssertionResult Start(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    std::vector<std::string> argv = {OVERLAPD_BIN,  "--backend",       "host",     "--host-devices",
                                     "4",           "--hazard-checks", "--listen", address_,
                                     "--state-dir", state_dir_};
    argv.insert(argv.end(), extra_flags_.begin(), extra_flags_.end());
    argv.insert(argv.begin(), launcher_.begin(), launcher_.end());
    child_ = Child::Spawn(argv, dir_);
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      RunResult node = Ctl({"node"}, std::chrono::seconds(10));
      if (node.exit_code == 0) return ::testing::AssertionSuccess();
      RunResult early = child_->Wait(std::chrono::milliseconds(0), /*kill_on_timeout=*/false);
      if (!child_->running()) {
        return ::testing::AssertionFailure()
               << "overlapd exited during startup (exit " << early.exit_code << ")\n"
               << early.err << early.out;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return ::testing::AssertionFailure() << "overlapd did not answer within the timeout";
  }

  RunResult Ctl(const std::vector<std::string>& args,
                std::chrono::milliseconds timeout = std::chrono::seconds(60)) const {
    std::vector<std::string> all = ctl_flags_;
    all.insert(all.end(), args.begin(), args.end());
    return Overlapctl(dir_, address_, all, timeout);
  }

  // Starts an overlapctl without waiting (e.g. `submit --wait` of a long job).
  std::unique_ptr<Child> CtlAsync(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {OVERLAPCTL_BIN, "--addr", address_};
    argv.insert(argv.end(), args.begin(), args.end());
    return Child::Spawn(argv, dir_);
  }

  // SIGTERM and wait; the daemon's own output is in the result.
  RunResult Terminate(std::chrono::milliseconds timeout) {
    if (!child_) return {};
    child_->Signal(SIGTERM);
    return child_->Wait(timeout);
  }

  void Kill() {
    if (!child_ || !child_->running()) return;
    child_->Signal(SIGKILL);
    child_->Wait(std::chrono::seconds(10));
  }

  bool running() const { return child_ && child_->running(); }
  pid_t pid() const { return child_ ? child_->pid() : -1; }

 private:
  std::string dir_;
  std::vector<std::string> extra_flags_;
  std::string address_;
  std::string state_dir_;
  std::vector<std::string> ctl_flags_;
  std::vector<std::string> launcher_;
  std::unique_ptr<Child> child_;
};

// The unprivileged user and group tests switch to (nobody, nogroup).
inline constexpr int kNobody = 65534;

// A command prefix that runs what follows as `uid` with only group `gid`.
inline std::vector<std::string> AsUser(int uid, int gid) {
  return {"/usr/bin/setpriv", "--reuid=" + std::to_string(uid), "--regid=" + std::to_string(gid),
          "--clear-groups", "--"};
}

// Whether tests can switch users: as root, with setpriv, and with `path`
// (a binary) reachable by nobody. The reason when not.
inline std::string CannotSwitchUsers(const std::string& path) {
  if (geteuid() != 0) return "needs root to switch to another user";
  if (access("/usr/bin/setpriv", X_OK) != 0) return "needs /usr/bin/setpriv";
  std::vector<std::string> argv = AsUser(kNobody, kNobody);
  argv.insert(argv.end(), {"/usr/bin/test", "-x", path});
  char dir_pattern[] = "/tmp/ovl-su-XXXXXX";
  const char* dir = mkdtemp(dir_pattern);
  if (dir == nullptr) return "cannot make a temporary directory";
  RunResult probe = Child::Spawn(argv, dir)->Wait(std::chrono::seconds(10));
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  if (probe.exit_code != 0) return "user nobody cannot run " + path;
  return "";
}

// A temporary directory others may enter (mkdtemp makes it 0700), for tests
// that run a program as another user inside it.
inline void OpenToOthers(const std::string& dir) { ::chmod(dir.c_str(), 0755); }

// `count` distinct TCP ports on 127.0.0.1 that nothing listens on right now.
// Every socket stays bound until all are chosen: a port closed and asked for
// again can come back, and two daemons given one port fail to start (one
// lists itself as its own peer).
inline std::vector<int> FreeLoopbackPorts(int count) {
  std::vector<int> fds;
  std::vector<int> ports;
  for (int i = 0; i < count; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port = ntohs(addr.sin_port);
    }
    fds.push_back(fd);
    ports.push_back(port);
  }
  for (int fd : fds) ::close(fd);
  return ports;
}

// A TCP port on 127.0.0.1 that nothing listens on right now.
inline int FreeLoopbackPort() { return FreeLoopbackPorts(1)[0]; }

// The CPU time (user + system) process `pid` has used, in seconds; -1 when
// it cannot be read.
inline double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return -1;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; fields >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
    if (i == 15) return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  return -1;
}

// A "Vm...:" field of /proc/PID/status (kB there) in bytes; -1 when it
// cannot be read.
inline int64_t ProcessStatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  return -1;
}

// Its resident memory (VmRSS) in bytes; -1 when it cannot be read.
inline int64_t ProcessRssBytes(pid_t pid) { return ProcessStatusBytes(pid, "VmRSS"); }

// Its peak resident memory (VmHWM) since it started or since its counter was
// reset (writing 5 to /proc/PID/clear_refs); -1 when it cannot be read.
inline int64_t PeakRssBytes(pid_t pid) { return ProcessStatusBytes(pid, "VmHWM"); }

// Whether process `pid` is idle again within `timeout`: it uses under 5% of
// a core over half a second.
inline bool BecomesIdle(pid_t pid, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    const double before = ProcessCpuSeconds(pid);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    if (ProcessCpuSeconds(pid) - before < 0.025) return true;
  }
  return false;
}

// A cluster key (peer_key_file) at `path`, mode 0600: the daemons of one
// test cluster share it, as the nodes of a real one do.
inline std::string WriteClusterKey(const std::string& path) {
  WriteFileOrDie(path, "0123456789abcdef0123456789abcdef-test-cluster-key\n");
  ::chmod(path.c_str(), 0600);
  return path;
}

// Node keys for the daemons of a test cluster, as an operator makes them:
// each node's key (peer_node_key_file) made by `overlapd --make-node-key` in
// `dir`, and one known-nodes file (peer_known_nodes_file) listing every node
// of `nodes` with its public key.
struct TestNodeKeys {
  std::vector<std::string> key_files;    // per node
  std::vector<std::string> public_keys;  // per node, "ed25519:..."
  std::string known_nodes_file;
  std::string error;  // "" when all were made

  // The config lines that give node `i` its key and the others'.
  std::string ConfigFor(size_t i) const {
    return "peer_node_key_file: \"" + key_files[i] + "\"\npeer_known_nodes_file: \"" +
           known_nodes_file + "\"\n";
  }
};

inline TestNodeKeys MakeTestNodeKeys(const std::string& dir,
                                     const std::vector<std::string>& nodes) {
  TestNodeKeys keys;
  std::string listing;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string path = dir + "/node-" + std::to_string(i) + ".key";
    RunResult made =
        Child::Spawn({OVERLAPD_BIN, "--make-node-key", path}, dir)->Wait(std::chrono::seconds(30));
    std::string public_key = made.out;
    while (!public_key.empty() && public_key.back() == '\n') public_key.pop_back();
    if (made.exit_code != 0 || public_key.rfind("ed25519:", 0) != 0) {
      keys.error = "overlapd --make-node-key " + path + ": " + Describe(made);
      return keys;
    }
    keys.key_files.push_back(path);
    keys.public_keys.push_back(public_key);
    listing += nodes[i] + " " + public_key + "\n";
  }
  keys.known_nodes_file = dir + "/known_nodes";
  WriteFileOrDie(keys.known_nodes_file, listing);
  ::chmod(keys.known_nodes_file.c_str(), 0644);
  return keys;
}

// Parses overlapctl's --json output; a parse failure is a test failure.
inline nlohmann::json ParseJson(const std::string& text) {
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(json.is_discarded()) << "not JSON:\n" << text;
  return json;
}

// Polls `get --json ID` until `done(job)` or the timeout; returns the last job.
inline nlohmann::json PollJob(const Daemon& daemon, const std::string& id,
                              const std::function<bool(const nlohmann::json&)>& done,
                              std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  const auto deadline = Clock::now() + timeout;
  nlohmann::json job;
  while (Clock::now() < deadline) {
    RunResult get = daemon.Ctl({"get", id, "--json"}, std::chrono::seconds(10));
    if (get.exit_code == 0) {
      job = ParseJson(get.out);
      if (done(job)) return job;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "job " << id << " did not reach the expected state; last seen:\n" << job.dump(2);
  return job;
}

inline std::function<bool(const nlohmann::json&)> StateIs(const std::string& state) {
  return [state](const nlohmann::json& job) { return job.value("state", "") == state; };
}

inline std::string Trim(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// Graphs used by several tests. Small shapes keep the suite within minutes on
// two cores; the long job runs until cancelled.
inline constexpr char kSmallGraph[] = R"(name: small-block
dtype: bf16
iterations: 3
warmup: 1
verify: true
ops:
  - {id: fc1, type: ag_gemm, m: 128, k: 128, n: 256, mode: chunked, chunks: 2, transport: nccl}
  - {id: fc2, type: gemm_rs, m: 128, k: 256, n: 128, mode: serial, transport: p2p, after: [fc1]}
  - {id: out, type: gemm_ar, m: 128, k: 128, n: 128, mode: bulk, transport: nccl}
)";

inline constexpr char kLongGraph[] = R"(name: long-job
dtype: fp32
iterations: 10000
warmup: 0
verify: false
ops:
  - {id: big, type: ag_gemm, m: 512, k: 512, n: 512, mode: serial, transport: nccl}
)";

// A fixture with a private directory, the graphs above written into it, and
// the real daemon started on demand; a failing test prints the daemon's log.
class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    small_graph_ = dir_.File("small.yaml");
    WriteFileOrDie(small_graph_, kSmallGraph);
    long_graph_ = dir_.File("long.yaml");
    WriteFileOrDie(long_graph_, kLongGraph);
  }
  void TearDown() override {
    if (HasFailure() && daemon_) std::cerr << "overlapd log:\n" << daemon_->Log();
  }

  // `launcher`: see Daemon::set_launcher.
  void StartDaemon(std::vector<std::string> flags = {}, std::vector<std::string> launcher = {}) {
    daemon_ = std::make_unique<Daemon>(dir_.path(), std::move(flags));
    daemon_->set_launcher(std::move(launcher));
    ASSERT_TRUE(daemon_->Start());
  }

  // Submits without waiting; returns the id.
  std::string Submit(const std::string& graph) {
    RunResult submit = daemon_->Ctl({"submit", graph});
    EXPECT_EQ(submit.exit_code, 0) << Describe(submit);
    return Trim(submit.out);
  }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
  std::string small_graph_;
  std::string long_graph_;
};

}  // namespace overlap::testing
