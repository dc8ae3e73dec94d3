// The unix socket steps both of the daemon's sockets share: listen, open to a
// group, accept until stopped, and the peer's credentials.
#include "server/net/unix_socket.h"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap::net {
namespace {

using ::testing::HasSubstr;

class UnixSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/unix_socket_test.XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/s.sock";
  }
  void TearDown() override {
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }

  OwnedFd Connect() const {
    OwnedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
        << std::strerror(errno);
    return fd;
  }

  std::string dir_;
  std::string path_;
};

TEST_F(UnixSocketTest, AcceptsAConnectionAndKnowsWhoMadeIt) {
  absl::StatusOr<OwnedFd> listening = ListenOnUnixSocket(path_, "test");
  ASSERT_TRUE(listening.ok()) << listening.status();
  OwnedFd stop(::eventfd(0, EFD_CLOEXEC));
  OwnedFd client = Connect();
  absl::StatusOr<OwnedFd> accepted = AcceptUntilStopped(listening->get(), stop.get(), SOCK_CLOEXEC);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  ASSERT_TRUE(accepted->valid());
  absl::StatusOr<PeerCredentials> peer = PeerCredentialsOf(accepted->get());
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(peer->uid, ::geteuid());
  EXPECT_EQ(peer->gid, ::getegid());
  EXPECT_EQ(peer->pid, ::getpid());
}

TEST_F(UnixSocketTest, StopsWhenTheStopFdIsWritten) {
  absl::StatusOr<OwnedFd> listening = ListenOnUnixSocket(path_, "test");
  ASSERT_TRUE(listening.ok()) << listening.status();
  OwnedFd stop(::eventfd(0, EFD_CLOEXEC));
  const uint64_t one = 1;
  ASSERT_EQ(::write(stop.get(), &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
  absl::StatusOr<OwnedFd> accepted = AcceptUntilStopped(listening->get(), stop.get(), SOCK_CLOEXEC);
  EXPECT_EQ(accepted.status().code(), absl::StatusCode::kCancelled);
}

TEST_F(UnixSocketTest, RefusesAPathTooLongAndOneItCannotBind) {
  const std::string long_path = dir_ + "/" + std::string(sizeof(sockaddr_un::sun_path), 'x');
  absl::StatusOr<OwnedFd> too_long = ListenOnUnixSocket(long_path, "session_socket");
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(too_long.status().message()),
              HasSubstr("session_socket: the path is too long for a unix socket"));

  absl::StatusOr<OwnedFd> no_dir = ListenOnUnixSocket(dir_ + "/missing/s.sock", "listen");
  EXPECT_EQ(no_dir.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(no_dir.status().message()), HasSubstr("listen: cannot listen on unix:"));
}

TEST_F(UnixSocketTest, OpensTheSocketToItsGroup) {
  absl::StatusOr<OwnedFd> listening = ListenOnUnixSocket(path_, "test");
  ASSERT_TRUE(listening.ok()) << listening.status();
  ASSERT_TRUE(OpenUnixSocketToGroup(path_, static_cast<int>(::getegid())).ok());
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, ::getegid());
}

}  // namespace
}  // namespace overlap::net
