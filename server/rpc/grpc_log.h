// gRPC core writes its own log lines ("E1201 ... Handshake failed ...") to
// stderr in its own format. The daemon sends them through spdlog instead, as
// logger "grpc", so that they carry the daemon's format and level. Its errors
// are mostly about peers (a client with a bad certificate), so they log as
// warnings: they are not the daemon's failures.
#pragma once

namespace overlap::rpc {

// Call once at start, after logging is set up.
void RouteGrpcLogsToSpdlog();

}  // namespace overlap::rpc
