// The overlapctl side of the gRPC API: one channel to overlapd and its Jobs and
// Node stubs, with gRPC statuses turned into absl::Status (the codes map 1:1).
//
// Unreachable vs refused: a call that fails because no daemon answered (nothing
// listening, connection refused, deadline hit before connecting) returns
// UNAVAILABLE or DEADLINE_EXCEEDED marked so that IsUnreachable() is true; a
// status the daemon itself sent never is. Calls never wait for the channel to
// become ready (wait_for_ready=false), so a missing daemon fails fast.
//
// Thread-compatible: one caller at a time.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "overlap/v1/overlap.grpc.pb.h"

namespace overlap::client {

// True when `status` says the daemon could not be reached at all.
bool IsUnreachable(const absl::Status& status);

// TLS to a daemon on HOST:PORT (server_tls.h on its side). Any file given
// turns TLS on; with no CA file the system's roots verify the daemon.
struct ClientTls {
  std::string ca_file;      // PEM CA that signed the daemon's certificate
  std::string cert_file;    // PEM client certificate, for a daemon that asks (mutual TLS)
  std::string key_file;     // its PEM private key
  std::string server_name;  // name to check the daemon's certificate against ("" = the host)

  bool enabled() const { return !ca_file.empty() || !cert_file.empty() || !key_file.empty(); }
};

class DaemonClient {
 public:
  // `address` is a gRPC target ("unix:/path", "host:port"); a bare absolute path
  // means a unix socket. `deadline` bounds each unary call. The channel
  // connects lazily on the first call; INVALID_ARGUMENT only for TLS files that
  // cannot be read, a certificate without its key, or TLS to a unix socket.
  static absl::StatusOr<std::unique_ptr<DaemonClient>> Create(
      const std::string& address, const ClientTls& tls = {},
      absl::Duration deadline = absl::Seconds(5));

  // The address as given by the user (what error messages name).
  const std::string& address() const { return address_; }

  // `nodes`: run it over these daemons (SubmitJobRequest.nodes).
  // `validate_only`: checked as a submission is, nothing queued; the job as it
  // would be, without an id (SubmitJobRequest.validate_only).
  absl::StatusOr<v1::Job> SubmitJob(const std::string& spec, const std::string& source_name,
                                    const std::vector<std::string>& nodes = {},
                                    bool validate_only = false);
  absl::StatusOr<v1::Job> GetJob(const std::string& id);
  // The flight recorder's rings of a job's collectives and its verdict.
  absl::StatusOr<v1::GetFlightResponse> GetFlight(const std::string& id);
  // One page of job summaries, newest first (limit 0 = the daemon's page size).
  absl::StatusOr<v1::ListJobsResponse> ListJobs(v1::JobState state, int limit,
                                                const std::string& page_token = "");
  absl::StatusOr<v1::Job> CancelJob(const std::string& id);
  absl::StatusOr<v1::GetNodeInfoResponse> GetNodeInfo();
  absl::StatusOr<v1::GetStatsResponse> GetStats();
  absl::StatusOr<v1::ListTunedSchedulesResponse> ListTunedSchedules(const v1::TuningFilter& filter);
  absl::StatusOr<v1::ForgetTunedSchedulesResponse> ForgetTunedSchedules(
      const v1::TuningFilter& filter, bool all);
  absl::StatusOr<v1::ForgetXidsResponse> ForgetXids(int device);
  absl::StatusOr<v1::GetCalibrationResponse> GetCalibration(int tp);
  absl::StatusOr<v1::PutCalibrationResponse> PutCalibration(const std::string& json, int tp);
  absl::StatusOr<v1::ListSessionsResponse> ListSessions(bool all_users, bool lanes);
  absl::Status CloseSession(const std::string& session_id);

  // Follows WatchJob until the job is final, calling `on_event` for every event
  // (may be null), and returns the final job. No deadline: jobs run for minutes.
  absl::StatusOr<v1::Job> WatchJob(const std::string& id,
                                   const std::function<void(const v1::Job&)>& on_event);
  // Follows WatchNode at `interval` (the daemon raises it to its floor),
  // calling `on_sample` for every sample until it returns false (then OK) or
  // the stream ends: its status (UNIMPLEMENTED from a daemon without the
  // stream, RESOURCE_EXHAUSTED when no watch slot is left or the reader was
  // dropped as too slow). No deadline.
  absl::Status WatchNode(absl::Duration interval,
                         const std::function<bool(const v1::NodeSample&)>& on_sample);

 private:
  DaemonClient(std::string address, std::shared_ptr<grpc::Channel> channel,
               absl::Duration deadline);

  void PrepareUnary(grpc::ClientContext& context) const;
  // One unary call of `method` on `stub` under PrepareUnary, its status converted.
  template <typename Stub, typename Request, typename Response>
  absl::StatusOr<Response> Call(Stub& stub,
                                grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                                             Response*),
                                const Request& request) const;
  absl::Status Convert(const grpc::Status& status) const;

  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Jobs::Stub> jobs_;
  std::unique_ptr<v1::Node::Stub> node_;
  absl::Duration deadline_;
};

}  // namespace overlap::client
