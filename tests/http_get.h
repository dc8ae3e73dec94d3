// Plain HTTP/1.0 against 127.0.0.1 for tests of the metrics endpoint: a GET,
// and connections that send nothing (or half a request) and wait.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace overlap::testing {

// A TCP connection to 127.0.0.1:`port` whose connect, reads and writes give up
// after `timeout_s`; -1 when it cannot connect.
inline int ConnectLoopback(int port, int timeout_s = 30) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeval limit{timeout_s, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// The whole response of GET `path` on 127.0.0.1:`port` ("" when nothing
// answers within `timeout_s` a step).
inline std::string HttpGet(int port, const std::string& path, int timeout_s = 30) {
  const int fd = ConnectLoopback(port, timeout_s);
  if (fd < 0) return "";
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
  (void)!write(fd, request.data(), request.size());
  std::string response;
  char buffer[4096];
  for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) response.append(buffer, n);
  close(fd);
  return response;
}

// A connection that sends `text` (perhaps nothing, perhaps half a request) and
// then waits; the caller closes it. -1 when it cannot connect.
inline int OpenIdleConnection(int port, const std::string& text = "") {
  const int fd = ConnectLoopback(port);
  if (fd >= 0 && !text.empty()) (void)!write(fd, text.data(), text.size());
  return fd;
}

// Whether the server closed `fd` (end of file, or a reset) before `deadline`;
// bytes it sends first are read and dropped.
inline bool ClosedBy(int fd, std::chrono::steady_clock::time_point deadline) {
  char buffer[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n <= 0) return true;
  }
}

}  // namespace overlap::testing
