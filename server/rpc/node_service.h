// overlap.v1.Node: what this daemon runs on and what it has done.
#pragma once

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "overlap/v1/overlap.grpc.pb.h"
#include "server/engine/engine.h"
#include "server/jobs/scheduler.h"
#include "server/runner/tuning_cache.h"
#include "server/rpc/jobs_service.h"

namespace overlap::rpc {

struct NodeInfoStatic {
  std::string state_dir;
  std::string listen_address;
};

class NodeService final : public v1::Node::Service {
 public:
  // All references must outlive the service; `tuning_cache` too, and may be
  // null (the daemon could not open one: the tuning RPCs then fail).
  NodeService(jobs::Scheduler& scheduler, const engine::Engine& engine, NodeInfoStatic info,
              const DaemonCounters& counters, runner::TuningCache* tuning_cache = nullptr);

  // The address as bound (a TCP port 0 is only known after the server starts).
  void set_listen_address(const std::string& address) {
    absl::MutexLock lock(&mu_);
    info_.listen_address = address;
  }

  grpc::Status GetNodeInfo(grpc::ServerContext* context, const v1::GetNodeInfoRequest* request,
                           v1::GetNodeInfoResponse* response) override;
  grpc::Status GetStats(grpc::ServerContext* context, const v1::GetStatsRequest* request,
                        v1::GetStatsResponse* response) override;
  grpc::Status ListTunedSchedules(grpc::ServerContext* context,
                                  const v1::ListTunedSchedulesRequest* request,
                                  v1::ListTunedSchedulesResponse* response) override;
  grpc::Status ForgetTunedSchedules(grpc::ServerContext* context,
                                    const v1::ForgetTunedSchedulesRequest* request,
                                    v1::ForgetTunedSchedulesResponse* response) override;
  grpc::Status ForgetXids(grpc::ServerContext* context, const v1::ForgetXidsRequest* request,
                          v1::ForgetXidsResponse* response) override;

 private:
  grpc::Status NoTuningCache() const;

  jobs::Scheduler& scheduler_;
  const engine::Engine& engine_;
  absl::Mutex mu_;
  NodeInfoStatic info_ ABSL_GUARDED_BY(mu_);
  const DaemonCounters& counters_;
  runner::TuningCache* tuning_cache_;
};

}  // namespace overlap::rpc
