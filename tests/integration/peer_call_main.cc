// peer_call: one call to a daemon's peer port, as the integration tests need
// to make it: as a daemon would (with the cluster key), or as someone who
// is not one (no key, another key, a false name). Prints "CODE message" and
// exits 0 when the call was made, 2 on bad arguments.
//
//   peer_call ADDRESS METHOD [--as NODE] [--key-file PATH] [--key TEXT]
//             [--node-key-file PATH] [--times N] [--parallel N]
//             [--coordinator NODE] [--job ID] [--node-index N] [--part ID]
//             [--spec-file PATH] [--owner O] [--priority P] [--name NAME]
//             [--nodes A,B] [--key-name K] [--value-bytes N] [--reason R]
//             [--schedules OP=MODE/CHUNKS/TRANSPORT[/ALGORITHM],...]
//
// METHOD: Hello, AdmitPart, CancelPart, HoldPart, ReportPart, StoreSet, StoreGet.
// --node-key-file signs the token with a node key (peer_node_key_file);
// --times N sends the same token N times (a replay), one line each;
// --parallel N makes the calls from N threads at once.
#include <grpcpp/create_channel.h>

#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "overlap/v1/peer.grpc.pb.h"
#include "server/peer/node_keys.h"
#include "server/peer/peer_auth.h"
#include "server/peer/peer_client.h"
#include "server/peer/peer_config.h"

namespace {

using overlap::peer::PeerIdentity;
namespace v1 = overlap::v1;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The call made `times` times with one token, as a replay would (the token
// made as PreparePeerContext makes it), from each of `parallel` threads at once.
int times = 1;
int parallel = 1;
std::shared_ptr<const overlap::peer::NodeKey> node_key;

template <typename Request, typename Response, typename Method>
std::vector<grpc::Status> CallTimes(v1::Peers::Stub& stub, Method method, const char* name,
                                    const PeerIdentity& self, const std::string& callee,
                                    const Request& request) {
  std::string token;
  if (!self.cluster_key.empty()) {
    const overlap::peer::PeerCallFacts facts{name, self.node, callee,
                                             overlap::peer::CanonicalBytes(request)};
    token = overlap::peer::SignPeerCall(self.cluster_key, facts, absl::Now(), node_key.get());
  }
  std::vector<grpc::Status> statuses;
  for (int i = 0; i < times; ++i) {
    grpc::ClientContext context;
    context.AddMetadata(overlap::peer::kVersionHeader, OVERLAP_VERSION);
    context.AddMetadata(overlap::peer::kNodeHeader, self.node);
    if (!token.empty()) context.AddMetadata(overlap::peer::kAuthHeader, token);
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    Response response;
    statuses.push_back((stub.*method)(&context, request, &response));
  }
  return statuses;
}

template <typename Request, typename Response, typename Method>
std::vector<grpc::Status> Call(v1::Peers::Stub& stub, Method method, const char* name,
                               const PeerIdentity& self, const std::string& callee,
                               const Request& request) {
  std::vector<std::vector<grpc::Status>> each(static_cast<size_t>(parallel));
  std::vector<std::thread> threads;
  for (int t = 0; t < parallel; ++t) {
    threads.emplace_back([&, t] {
      each[static_cast<size_t>(t)] =
          CallTimes<Request, Response>(stub, method, name, self, callee, request);
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::vector<grpc::Status> statuses;
  for (const auto& some : each) statuses.insert(statuses.end(), some.begin(), some.end());
  return statuses;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: peer_call ADDRESS METHOD [--flag value ...]\n";
    return 2;
  }
  const std::string address = argv[1];
  const std::string method = argv[2];
  std::map<std::string, std::string> flags;
  for (int i = 3; i + 1 < argc; i += 2) flags[argv[i]] = argv[i + 1];
  auto flag = [&](const std::string& name, const std::string& otherwise = "") {
    auto it = flags.find(name);
    return it == flags.end() ? otherwise : it->second;
  };
  PeerIdentity self{flag("--as", "127.0.0.1:1"), flag("--key")};
  if (!flag("--key-file").empty()) {
    absl::StatusOr<std::string> key = overlap::peer::ReadClusterKey(flag("--key-file"));
    if (!key.ok()) {
      std::cout << "KEY " << key.status().message() << "\n";
      return 0;
    }
    self.cluster_key = *key;
  }
  if (!flag("--node-key-file").empty()) {
    absl::StatusOr<overlap::peer::NodeKey> key =
        overlap::peer::ReadNodeKey(flag("--node-key-file"));
    if (!key.ok()) {
      std::cout << "KEY " << key.status().message() << "\n";
      return 0;
    }
    node_key = std::make_shared<const overlap::peer::NodeKey>(std::move(*key));
  }
  int index = 0, priority = 0;
  int64_t value_bytes = 0;
  if (!absl::SimpleAtoi(flag("--node-index", "0"), &index) ||
      !absl::SimpleAtoi(flag("--priority", "0"), &priority) ||
      !absl::SimpleAtoi(flag("--value-bytes", "0"), &value_bytes) ||
      !absl::SimpleAtoi(flag("--times", "1"), &times) || times < 1 ||
      !absl::SimpleAtoi(flag("--parallel", "1"), &parallel) || parallel < 1) {
    std::cerr << "peer_call: bad number\n";
    return 2;
  }
  v1::GlobalJobId id;
  id.set_coordinator(flag("--coordinator", self.node));
  id.set_job_id(flag("--job", "job-000001"));

  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(256 << 20);
  std::unique_ptr<v1::Peers::Stub> stub = v1::Peers::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  std::vector<grpc::Status> statuses;
  if (method == "Hello") {
    v1::HelloRequest request;
    request.set_node(self.node);
    statuses = Call<v1::HelloRequest, v1::HelloResponse>(*stub, &v1::Peers::Stub::Hello, "Hello",
                                                         self, address, request);
  } else if (method == "AdmitPart") {
    v1::AdmitPartRequest request;
    *request.mutable_global_id() = id;
    request.set_spec(ReadFile(flag("--spec-file")));
    for (absl::string_view node : absl::StrSplit(flag("--nodes", address), ',')) {
      request.add_nodes(std::string(node));
    }
    request.set_node_index(index);
    request.set_owner(flag("--owner", "uid:0"));
    request.set_priority(priority);
    request.set_name(flag("--name", "attack"));
    // The coordinator's decisions, as AdmitPart carries them.
    for (absl::string_view entry : absl::StrSplit(flag("--schedules"), ',', absl::SkipEmpty())) {
      const std::vector<std::string> op_schedule = absl::StrSplit(entry, '=');
      const std::vector<std::string> parts = absl::StrSplit(op_schedule.back(), '/');
      v1::DecidedSchedule* decided = request.add_schedules();
      decided->set_op_id(op_schedule[0]);
      decided->set_mode(parts[0]);
      int chunks = 1;
      if (parts.size() > 1 && !absl::SimpleAtoi(parts[1], &chunks)) chunks = 1;
      decided->set_chunks(chunks);
      if (parts.size() > 2) decided->set_transport(parts[2]);
      if (parts.size() > 3) decided->set_algorithm(parts[3]);
    }
    statuses = Call<v1::AdmitPartRequest, v1::AdmitPartResponse>(
        *stub, &v1::Peers::Stub::AdmitPart, "AdmitPart", self, address, request);
  } else if (method == "CancelPart") {
    v1::CancelPartRequest request;
    *request.mutable_global_id() = id;
    request.set_reason(flag("--reason", "attack"));
    statuses = Call<v1::CancelPartRequest, v1::CancelPartResponse>(
        *stub, &v1::Peers::Stub::CancelPart, "CancelPart", self, address, request);
  } else if (method == "HoldPart") {
    v1::HoldPartRequest request;
    *request.mutable_global_id() = id;
    request.set_node_index(index);
    request.set_part_id(flag("--part"));
    statuses = Call<v1::HoldPartRequest, v1::HoldPartResponse>(*stub, &v1::Peers::Stub::HoldPart,
                                                               "HoldPart", self, address, request);
  } else if (method == "ReportPart") {
    v1::ReportPartRequest request;
    *request.mutable_global_id() = id;
    request.set_node_index(index);
    request.set_part_id(flag("--part"));
    request.set_error_code(13);
    request.set_error(flag("--reason", "attack"));
    statuses = Call<v1::ReportPartRequest, v1::ReportPartResponse>(
        *stub, &v1::Peers::Stub::ReportPart, "ReportPart", self, address, request);
  } else if (method == "StoreSet") {
    v1::StoreSetRequest request;
    *request.mutable_global_id() = id;
    request.set_key(flag("--key-name", "k"));
    request.set_value(std::string(static_cast<size_t>(value_bytes), 'x'));
    statuses = Call<v1::StoreSetRequest, v1::StoreSetResponse>(*stub, &v1::Peers::Stub::StoreSet,
                                                               "StoreSet", self, address, request);
  } else if (method == "StoreGet") {
    v1::StoreGetRequest request;
    *request.mutable_global_id() = id;
    request.set_key(flag("--key-name", "k"));
    statuses = Call<v1::StoreGetRequest, v1::StoreGetResponse>(*stub, &v1::Peers::Stub::StoreGet,
                                                               "StoreGet", self, address, request);
  } else {
    std::cerr << "peer_call: unknown method " << method << "\n";
    return 2;
  }
  static const char* kCodes[] = {"OK",
                                 "CANCELLED",
                                 "UNKNOWN",
                                 "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED",
                                 "NOT_FOUND",
                                 "ALREADY_EXISTS",
                                 "PERMISSION_DENIED",
                                 "RESOURCE_EXHAUSTED",
                                 "FAILED_PRECONDITION",
                                 "ABORTED",
                                 "OUT_OF_RANGE",
                                 "UNIMPLEMENTED",
                                 "INTERNAL",
                                 "UNAVAILABLE",
                                 "DATA_LOSS",
                                 "UNAUTHENTICATED"};
  // One line per call made: "CODE message".
  for (const grpc::Status& status : statuses) {
    const int code = static_cast<int>(status.error_code());
    std::cout << (code >= 0 && code <= 16 ? kCodes[code] : "?") << " " << status.error_message()
              << "\n";
  }
  return 0;
}
