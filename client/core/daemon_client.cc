#include "client/core/daemon_client.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/format/printable.h"
#include "client/format/report.h"
#include "common/pem_file.h"
#include "common/private_dir.h"
#include "common/status_macros.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace overlap::client {
namespace {

constexpr char kUnreachablePayload[] = "type.overlap.dev/overlapctl.unreachable";

std::string ToTarget(const std::string& address) {
  if (absl::StartsWith(address, "/")) return "unix:" + address;
  return address;
}

// A socket in /tmp/overlapd-UID is only trusted when that directory is the
// user's own (common/private_dir.h); a missing one is left to the connection
// error, which says the daemon is not there.
absl::Status CheckSocketDirectory(const std::string& target) {
  absl::string_view path = target;
  if (!absl::ConsumePrefix(&path, "unix:")) return absl::OkStatus();
  const std::string dir = std::filesystem::path(std::string(path)).parent_path();
  if (dir != FallbackSocketDir(::getuid())) return absl::OkStatus();
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 && errno == ENOENT) return absl::OkStatus();
  return CheckPrivateDir(dir, ::getuid(), "--addr");
}

}  // namespace

bool IsUnreachable(const absl::Status& status) {
  return status.GetPayload(kUnreachablePayload).has_value();
}

absl::StatusOr<std::unique_ptr<DaemonClient>> DaemonClient::Create(const std::string& address,
                                                                   const ClientTls& tls,
                                                                   absl::Duration deadline) {
  grpc::ChannelArguments args;
  // One quick connection attempt is what a CLI wants; the default backoff would
  // only matter for a long-lived client.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // A job holds its spec (max_spec_bytes, set by the operator) and every op's
  // result: whatever the daemon sends back is taken.
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, -1);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (tls.enabled()) {
    const std::string target = ToTarget(address);
    if (absl::StartsWith(target, "unix:")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls-*: TLS is for a daemon on HOST:PORT, not ", address));
    }
    if (tls.cert_file.empty() != tls.key_file.empty()) {
      return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
    }
    grpc::SslCredentialsOptions options;
    if (!tls.ca_file.empty()) {
      ASSIGN_OR_RETURN(options.pem_root_certs, ReadPemFile(tls.ca_file, "--tls-ca", "CERTIFICATE"));
    }
    if (!tls.cert_file.empty()) {
      ASSIGN_OR_RETURN(options.pem_cert_chain,
                       ReadPemFile(tls.cert_file, "--tls-cert", "CERTIFICATE"));
      ASSIGN_OR_RETURN(options.pem_private_key,
                       ReadPemFile(tls.key_file, "--tls-key", "PRIVATE KEY"));
    }
    credentials = grpc::SslCredentials(options);
    if (!tls.server_name.empty()) {
      args.SetSslTargetNameOverride(tls.server_name);
    }
  }
  const std::string target = ToTarget(address);
  if (!absl::StartsWith(target, "unix:") && !absl::StrContains(target, "://")) {
    // host:port, [v6]:port; a bare name would go to DNS on no port at all.
    const size_t colon = target.rfind(':');
    const bool has_port = colon != std::string::npos && colon + 1 < target.size() &&
                          target.find(']', colon) == std::string::npos;
    if (!has_port) {
      return absl::InvalidArgumentError(
          absl::StrCat("--addr ", address, ": a TCP address needs its port (HOST:PORT, e.g. ",
                       address, ":7070), or use unix:/path for a socket"));
    }
  }
  RETURN_IF_ERROR(CheckSocketDirectory(target));
  auto channel = grpc::CreateCustomChannel(ToTarget(address), credentials, args);
  return std::unique_ptr<DaemonClient>(new DaemonClient(address, std::move(channel), deadline));
}

DaemonClient::DaemonClient(std::string address, std::shared_ptr<grpc::Channel> channel,
                           absl::Duration deadline)
    : address_(std::move(address)),
      channel_(std::move(channel)),
      jobs_(v1::Jobs::NewStub(channel_)),
      node_(v1::Node::NewStub(channel_)),
      deadline_(deadline) {}

void DaemonClient::PrepareUnary(grpc::ClientContext& context) const {
  context.set_wait_for_ready(false);
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(deadline_));
}

absl::Status DaemonClient::Convert(const grpc::Status& status) const {
  if (status.ok()) return absl::OkStatus();
  absl::Status result(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  const bool transport_failure = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                                 status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
  // The daemon may itself answer UNAVAILABLE (device unhealthy); then the
  // channel is connected, and that is a refusal, not an unreachable daemon.
  if (transport_failure && channel_->GetState(false) != GRPC_CHANNEL_READY) {
    result.SetPayload(kUnreachablePayload, absl::Cord("1"));
  }
  return result;
}

template <typename Stub, typename Request, typename Response>
absl::StatusOr<Response> DaemonClient::Call(Stub& stub,
                                            grpc::Status (Stub::*method)(grpc::ClientContext*,
                                                                         const Request&, Response*),
                                            const Request& request) const {
  grpc::ClientContext context;
  PrepareUnary(context);
  Response response;
  RETURN_IF_ERROR(Convert((stub.*method)(&context, request, &response)));
  return response;
}

namespace {

// The job a Jobs reply carries, ready to print.
template <typename Response>
absl::StatusOr<v1::Job> PrintableJob(absl::StatusOr<Response> response) {
  if (!response.ok()) return response.status();
  MakePrintable(response->mutable_job());
  return std::move(*response->mutable_job());
}

}  // namespace

absl::StatusOr<v1::Job> DaemonClient::SubmitJob(const std::string& spec,
                                                const std::string& source_name,
                                                const std::vector<std::string>& nodes,
                                                bool validate_only) {
  v1::SubmitJobRequest request;
  request.set_spec(spec);
  request.set_source_name(source_name);
  request.set_validate_only(validate_only);
  for (const std::string& node : nodes) request.add_nodes(node);
  return PrintableJob(Call(*jobs_, &v1::Jobs::Stub::SubmitJob, request));
}

absl::StatusOr<v1::Job> DaemonClient::GetJob(const std::string& id) {
  v1::GetJobRequest request;
  request.set_id(id);
  return PrintableJob(Call(*jobs_, &v1::Jobs::Stub::GetJob, request));
}

absl::StatusOr<v1::GetFlightResponse> DaemonClient::GetFlight(const std::string& id) {
  v1::GetFlightRequest request;
  request.set_id(id);
  return Call(*jobs_, &v1::Jobs::Stub::GetFlight, request);
}

absl::StatusOr<v1::ListJobsResponse> DaemonClient::ListJobs(v1::JobState state, int limit,
                                                            const std::string& page_token) {
  v1::ListJobsRequest request;
  request.set_state(state);
  request.set_limit(limit);
  request.set_page_token(page_token);
  ASSIGN_OR_RETURN(v1::ListJobsResponse response, Call(*jobs_, &v1::Jobs::Stub::ListJobs, request));
  for (v1::Job& job : *response.mutable_jobs()) MakePrintable(&job);
  return response;
}

absl::StatusOr<v1::Job> DaemonClient::CancelJob(const std::string& id) {
  v1::CancelJobRequest request;
  request.set_id(id);
  return PrintableJob(Call(*jobs_, &v1::Jobs::Stub::CancelJob, request));
}

absl::StatusOr<v1::GetNodeInfoResponse> DaemonClient::GetNodeInfo() {
  return Call(*node_, &v1::Node::Stub::GetNodeInfo, v1::GetNodeInfoRequest());
}

absl::StatusOr<v1::GetStatsResponse> DaemonClient::GetStats() {
  return Call(*node_, &v1::Node::Stub::GetStats, v1::GetStatsRequest());
}

absl::StatusOr<v1::ListTunedSchedulesResponse> DaemonClient::ListTunedSchedules(
    const v1::TuningFilter& filter) {
  v1::ListTunedSchedulesRequest request;
  *request.mutable_filter() = filter;
  return Call(*node_, &v1::Node::Stub::ListTunedSchedules, request);
}

absl::StatusOr<v1::ForgetTunedSchedulesResponse> DaemonClient::ForgetTunedSchedules(
    const v1::TuningFilter& filter, bool all) {
  v1::ForgetTunedSchedulesRequest request;
  *request.mutable_filter() = filter;
  request.set_all(all);
  return Call(*node_, &v1::Node::Stub::ForgetTunedSchedules, request);
}

absl::StatusOr<v1::ForgetXidsResponse> DaemonClient::ForgetXids(int device) {
  v1::ForgetXidsRequest request;
  request.set_device(device);
  return Call(*node_, &v1::Node::Stub::ForgetXids, request);
}

absl::StatusOr<v1::GetCalibrationResponse> DaemonClient::GetCalibration(int tp) {
  v1::GetCalibrationRequest request;
  request.set_tp(tp);
  return Call(*node_, &v1::Node::Stub::GetCalibration, request);
}

absl::StatusOr<v1::PutCalibrationResponse> DaemonClient::PutCalibration(const std::string& json,
                                                                        int tp) {
  v1::PutCalibrationRequest request;
  request.set_calibration_json(json);
  request.set_tp(tp);
  return Call(*node_, &v1::Node::Stub::PutCalibration, request);
}

absl::StatusOr<v1::ListSessionsResponse> DaemonClient::ListSessions(bool all_users, bool lanes) {
  v1::ListSessionsRequest request;
  request.set_all_users(all_users);
  request.set_lanes(lanes);
  return Call(*node_, &v1::Node::Stub::ListSessions, request);
}

absl::Status DaemonClient::CloseSession(const std::string& session_id) {
  v1::CloseSessionRequest request;
  request.set_session_id(session_id);
  return Call(*node_, &v1::Node::Stub::CloseSession, request).status();
}

absl::StatusOr<v1::Job> DaemonClient::WatchJob(
    const std::string& id, const std::function<void(const v1::Job&)>& on_event) {
  grpc::ClientContext context;
  context.set_wait_for_ready(false);
  v1::WatchJobRequest request;
  request.set_id(id);
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader = jobs_->WatchJob(&context, request);
  v1::JobEvent event;
  v1::Job last;
  bool got_event = false;
  while (reader->Read(&event)) {
    got_event = true;
    last = std::move(*event.mutable_job());
    MakePrintable(&last);
    if (on_event) on_event(last);
  }
  absl::Status status = Convert(reader->Finish());
  if (!status.ok()) return status;
  if (got_event && IsFinalState(last.state())) return last;
  // The stream ended cleanly without a final state (it should not): ask once.
  return GetJob(id);
}

absl::Status DaemonClient::WatchNode(absl::Duration interval,
                                     const std::function<bool(const v1::NodeSample&)>& on_sample) {
  grpc::ClientContext context;
  context.set_wait_for_ready(false);
  v1::WatchNodeRequest request;
  request.set_interval_ms(static_cast<uint32_t>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(interval), 0, int64_t{1} << 31)));
  std::unique_ptr<grpc::ClientReader<v1::NodeSample>> reader = node_->WatchNode(&context, request);
  v1::NodeSample sample;
  while (reader->Read(&sample)) {
    for (v1::Job& job : *sample.mutable_running()) MakePrintable(&job);
    if (!on_sample(sample)) {
      context.TryCancel();
      reader->Finish();  // CANCELLED, as asked
      return absl::OkStatus();
    }
  }
  return Convert(reader->Finish());
}

}  // namespace overlap::client
