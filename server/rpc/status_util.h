// absl::Status <-> grpc::Status. The codes are the same numbers (both are
// google.rpc.Code), so the mapping is a cast that keeps the message.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace overlap::rpc {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace overlap::rpc
