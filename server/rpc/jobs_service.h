// overlap.v1.Jobs: a thin adapter over the scheduler. SubmitJob checks a spec
// (size, syntax, graph, device memory, queue room, draining) and hands it to the
// scheduler, which stores it before the call returns; no job work runs on the
// gRPC threads. Every refusal is one line naming the field, with the code that
// fits (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNAVAILABLE, NOT_FOUND, ...).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/time/time.h"
#include "common/graph.h"
#include "overlap/v1/overlap.grpc.pb.h"
#include "server/engine/engine.h"
#include "server/jobs/scheduler.h"

namespace overlap::rpc {

// Counters since this process started (GetStats). Thread-safe.
struct DaemonCounters {
  std::atomic<int64_t> jobs_submitted{0};
  std::atomic<int64_t> jobs_rejected{0};
  absl::Time start_time = absl::Now();
};

struct JobsServiceOptions {
  int max_iterations = 10000;
  int64_t max_spec_bytes = 1 << 20;
  int max_ops_per_job = 4096;
  // WatchJob streams open at once; each holds a server thread.
  int max_watchers = 256;
  // Bytes per device a job needs; null = runner::JobBytesPerDevice.
  std::function<int64_t(const JobSpec& spec, int tp)> bytes_per_device;
};

// RESOURCE_EXHAUSTED's message for a job that needs `needed` bytes on each of
// its devices where `device`'s pool (sized by the config key `pool_setting`)
// holds less: says what would make it fit, a larger pool where the GPU has the
// room, more GPUs or smaller shapes where it does not.
std::string DoesNotFitMessage(int64_t needed, const engine::DeviceInfo& device,
                              const std::string& pool_setting);

class JobsService final : public v1::Jobs::Service {
 public:
  // All references must outlive the service.
  JobsService(jobs::Scheduler& scheduler, const engine::Engine& engine, JobsServiceOptions options,
              DaemonCounters& counters);

  grpc::Status SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::GetJobResponse* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                         v1::CancelJobResponse* response) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;

  // The checks and the hand-over of SubmitJob, without gRPC.
  absl::StatusOr<v1::Job> Submit(const std::string& spec_text, const std::string& source_name);

 private:
  absl::StatusOr<v1::Job> Admit(const std::string& spec_text, const std::string& source_name);

  jobs::Scheduler& scheduler_;
  const engine::Engine& engine_;
  const JobsServiceOptions options_;
  DaemonCounters& counters_;
  std::atomic<int> watchers_{0};
};

}  // namespace overlap::rpc
