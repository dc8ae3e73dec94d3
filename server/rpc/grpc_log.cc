#include "server/rpc/grpc_log.h"

#include <grpc/support/log.h>

#include "common/logging.h"

namespace overlap::rpc {
namespace {

void ToSpdlog(gpr_log_func_args* args) {
  static auto* const log = new std::shared_ptr<spdlog::logger>(GetLogger("grpc"));
  spdlog::level::level_enum level = spdlog::level::debug;
  if (args->severity == GPR_LOG_SEVERITY_ERROR) level = spdlog::level::warn;
  if (args->severity == GPR_LOG_SEVERITY_INFO) level = spdlog::level::info;
  (*log)->log(level, "{} ({}:{})", args->message, args->file, args->line);
}

}  // namespace

void RouteGrpcLogsToSpdlog() { gpr_set_log_function(ToSpdlog); }

}  // namespace overlap::rpc
