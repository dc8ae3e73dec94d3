// A minimal HTTP/1.x endpoint for Prometheus scrapes and health probes: GET of a
// few paths, each answered with text from its callback, 404 elsewhere, 405 for
// other methods, each connection closed after its response.
//
// No single client can hold it: one thread waits on every connection at once
// (poll over non-blocking sockets) and a small fixed pool of workers runs the
// handlers, so a connection that sends nothing, or half a request, or never
// reads its answer, holds only its own socket:
//   - a connection that sends no byte for `idle_timeout`, or not its whole
//     request head within `request_timeout`, is closed;
//   - a request head past `max_request_bytes` is answered 431 and closed;
//   - an answer not taken within `write_timeout` is dropped with its connection;
//   - past `max_connections` open at once, the oldest connection still reading
//     its request is closed to make room; when every one is being answered,
//     the new one gets 503 at once.
//
// Why not civetweb (prometheus-cpp's Exposer): Debian builds civetweb with a
// 100 KiB thread stack, smaller than the static TLS that libcublasLt, OpenBLAS
// and NCCL bring into the daemon (~176 KiB), so its threads could not start on
// a CUDA-linked overlapd ("Cannot create threads"). These threads have the
// default stack.
//
// Thread safety: Start and the destructor from one thread; the handlers run on
// the workers, up to `workers` at once, and must be thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace overlap::rpc {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

struct HttpEndpointOptions {
  std::chrono::milliseconds idle_timeout{5000};      // no byte of the request for this long
  std::chrono::milliseconds request_timeout{10000};  // the whole request head
  std::chrono::milliseconds write_timeout{10000};    // the client taking its answer
  int max_connections = 64;
  size_t max_request_bytes = 16 * 1024;  // request line and headers
  int workers = 2;                       // handlers running at once
};

class HttpEndpoint {
 public:
  using Handler = std::function<HttpResponse()>;
  using Routes = std::map<std::string, Handler>;  // path -> its handler

  // Listens on `address` (HOST:PORT or [V6]:PORT; port 0 picks one) and answers
  // GET of each path in `routes` with its handler. INVALID_ARGUMENT for an
  // address that does not parse or resolve, or options out of range;
  // FAILED_PRECONDITION naming the system's reason (address in use, permission
  // denied) when it cannot listen or start its threads.
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(const std::string& address,
                                                             Routes routes,
                                                             HttpEndpointOptions options = {});
  // Stops listening, closes every connection (a handler running finishes
  // first) and joins the threads.
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  int port() const;

 private:
  class Loop;
  explicit HttpEndpoint(std::unique_ptr<Loop> loop);

  std::unique_ptr<Loop> loop_;
  std::thread io_thread_;
  std::vector<std::thread> workers_;
};

}  // namespace overlap::rpc
