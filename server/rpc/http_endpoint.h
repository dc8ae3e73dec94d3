// A minimal HTTP/1.x endpoint for Prometheus scrapes: GET of a few paths, each
// answered with text from its callback, 404 elsewhere, 405 for other methods, one
// connection at a time, each closed after its response.
//
// Why not civetweb (prometheus-cpp's Exposer): Debian builds civetweb with a
// 100 KiB thread stack, smaller than the static TLS that libcublasLt, OpenBLAS
// and NCCL bring into the daemon (~176 KiB), so its threads could not start on
// a CUDA-linked overlapd ("Cannot create threads"). This endpoint serves from
// one thread with the default stack, and a scrape's work (SQLite, NVML,
// protobufs) runs on it.
//
// Thread safety: Start and the destructor from one thread; the handler runs on
// the endpoint's thread, one request at a time.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace overlap::rpc {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpEndpoint {
 public:
  using Handler = std::function<HttpResponse()>;
  using Routes = std::map<std::string, Handler>;  // path -> its handler

  // Listens on `address` (HOST:PORT or [V6]:PORT; port 0 picks one) and answers
  // GET of each path in `routes` with its handler. INVALID_ARGUMENT for an address that does not
  // parse or resolve, FAILED_PRECONDITION naming the system's reason (address
  // in use, permission denied) when it cannot listen.
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(const std::string& address,
                                                             Routes routes);
  ~HttpEndpoint();  // stops listening and joins the thread
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  int port() const { return port_; }

 private:
  HttpEndpoint(int listen_fd, int stop_fd, int port, Routes routes);
  void Serve();
  void Answer(int fd);

  const int listen_fd_;
  const int stop_fd_;  // an eventfd: written once to stop Serve
  const int port_;
  const Routes routes_;
  std::thread thread_;
};

}  // namespace overlap::rpc
