// absl::Status <-> grpc::Status. The codes are the same numbers (both are
// google.rpc.Code), so the mapping is a cast that keeps the message.
#pragma once

#include <grpcpp/support/status.h>

#include <cstddef>
#include <string>
#include <utility>

#include "absl/status/status.h"

namespace overlap::net {

// The most of a message that goes into a status: gRPC sends it in trailers,
// whose size is limited (8 KiB by default), and a longer one would reach the
// client as RESOURCE_EXHAUSTED "metadata size exceeds limit" instead of its
// own code. Messages quote at most kMaxQuotedBytes of user input
// (common/text.h); this is the backstop.
inline constexpr size_t kMaxStatusMessageBytes = 2048;

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string message(status.message());
  if (message.size() > kMaxStatusMessageBytes) {
    size_t cut = kMaxStatusMessageBytes;
    // Not inside a UTF-8 sequence: continuation bytes are 10xxxxxx.
    while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
    message = message.substr(0, cut) + "... (message cut)";
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::move(message));
}

}  // namespace overlap::net
