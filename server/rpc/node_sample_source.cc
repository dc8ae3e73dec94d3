#include "server/rpc/node_sample_source.h"

#include <map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "server/jobs/job_record.h"
#include "server/wire/job_wire.h"
#include "server/wire/session_wire.h"

namespace overlap::rpc {
namespace {

// A running job as a sample shows it: its last finished op only, without
// timelines, so that a sample stays small however long the job.
v1::Job Trimmed(const jobs::JobRecord& record, const std::string& node_name) {
  v1::Job job = wire::ToProto(record);
  job.set_global_id(jobs::GlobalIdOf(record, node_name));
  v1::JobResult* result = job.mutable_result();
  auto* ops = result->mutable_ops();
  if (ops->size() > 1) ops->DeleteSubrange(0, ops->size() - 1);
  for (v1::OpResult& op : *ops) op.clear_timeline();
  result->clear_layer_timeline();
  return job;
}

}  // namespace

v1::NodeSample TakeNodeSample(const NodeSampleParts& parts) {
  v1::NodeSample sample;
  v1::GetNodeInfoResponse info = parts.node.Info();
  sample.mutable_devices()->Swap(info.mutable_devices());
  absl::StatusOr<std::vector<jobs::JobRecord>> running =
      parts.queue.List(jobs::JobState::kRunning, kSampleMaxRunningJobs);
  if (running.ok()) {
    for (const jobs::JobRecord& job : *running) {
      *sample.add_running() = Trimmed(job, info.node_name());
    }
  }
  if (parts.sessions != nullptr) {
    std::map<std::string, sessions::SessionFigures> figures;
    if (parts.lanes != nullptr) {
      for (sessions::SessionFigures& f : parts.lanes->Figures()) figures[f.id] = std::move(f);
    }
    for (const sessions::SessionRow& row : parts.sessions->List("")) {
      if (row.state != "joining" && row.state != "ready") continue;
      auto it = figures.find(row.id);
      *sample.add_sessions() =
          wire::ToSessionInfo(row, it == figures.end() ? nullptr : &it->second);
    }
  }
  return sample;
}

bool SessionVisibleTo(const v1::SessionInfo& session, const std::string& owner_key) {
  return session.owner() == owner_key ||
         absl::EndsWith(session.owner(), std::string(" (") + owner_key + ")");
}

}  // namespace overlap::rpc
