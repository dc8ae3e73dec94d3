// The peer listener in-process: two listeners on 127.0.0.1:0 and the stubs
// of peer_client.h between them; the version header; the null handler; a
// handler's requests, callers and statuses; and mutual TLS with certificates
// made by the openssl CLI at test time.
#include "server/peer/peer_server.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <stdlib.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/peer/peer_auth.h"
#include "server/peer/peer_client.h"
#include "tests/openssl_util.h"

namespace overlap::peer {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr absl::Duration kCallTimeout = absl::Seconds(10);
constexpr char kKey[] = "test-cluster-key-0123456789abcdef";
// The daemon the tests' calls come from.
const PeerIdentity kMe{"127.0.0.1:1", kKey};

// Makes `context` a call of `method` with `request` to `callee`, as kMe.
void Prepare(grpc::ClientContext* context, const std::string& callee, absl::string_view method,
             const google::protobuf::Message& request, absl::Duration timeout = kCallTimeout) {
  PreparePeerContext(context, timeout, kMe, method, callee, request);
}

// Records what reached it; answers from its fields.
class FakeHandler : public PeerHandler {
 public:
  absl::StatusOr<std::string> AdmitPart(const PeerCaller& caller,
                                        const PartRequest& request) override {
    Record(caller, "AdmitPart:" + request.global_id.job_id);
    if (!admit_status.ok()) return admit_status;
    return "part-" + request.global_id.job_id;
  }
  absl::Status CancelPart(const PeerCaller& caller, const CancelRequest& request) override {
    Record(caller, "CancelPart:" + request.reason);
    return absl::OkStatus();
  }
  absl::StatusOr<HoldAnswer> HoldPart(const PeerCaller& caller,
                                      const HoldRequest& request) override {
    Record(caller, "HoldPart:" + request.part_id);
    return HoldAnswer{HoldDecision::kStart, ""};
  }
  absl::Status ReportPart(const PeerCaller& caller, const PartReport& report) override {
    Record(caller, "ReportPart:" + std::string(report.outcome.status().message()));
    return absl::OkStatus();
  }
  absl::Status StoreSet(const PeerCaller& caller, const StoreCall& call) override {
    Record(caller, "StoreSet:" + call.key);
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> StoreGet(const PeerCaller& caller, const StoreCall& call) override {
    Record(caller, "StoreGet:" + call.key);
    if (call.key == "block") {
      release.WaitForNotificationWithTimeout(absl::Seconds(10));
      return absl::DeadlineExceededError("released");
    }
    return std::string("value\0of ", 9) + call.key;
  }

  std::vector<std::string> calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  PeerCaller last_caller() {
    absl::MutexLock lock(&mu_);
    return last_caller_;
  }

  absl::Status admit_status = absl::OkStatus();
  absl::Notification release;

 private:
  void Record(const PeerCaller& caller, const std::string& call) {
    absl::MutexLock lock(&mu_);
    calls_.push_back(call);
    last_caller_ = caller;
  }
  absl::Mutex mu_;
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mu_);
  PeerCaller last_caller_ ABSL_GUARDED_BY(mu_);
};

std::unique_ptr<PeerServer> StartOrDie(PeerHandler* handler, PeerHello hello,
                                       const PeerTls& tls = {},
                                       const std::string& listen = "127.0.0.1:0",
                                       const std::string& key = kKey) {
  PeerServerOptions options;
  options.listen = listen;
  options.tls = tls;
  options.cluster_key = key;
  absl::StatusOr<std::unique_ptr<PeerServer>> server =
      PeerServer::Start(options, handler, std::move(hello));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

std::unique_ptr<v1::Peers::Stub> StubOrDie(const std::string& address, const PeerTls& tls = {}) {
  PeerChannelOptions options;
  options.tls = tls;
  absl::StatusOr<std::unique_ptr<v1::Peers::Stub>> stub = NewPeerStub(options, address);
  EXPECT_TRUE(stub.ok()) << stub.status();
  return stub.ok() ? std::move(*stub) : nullptr;
}

v1::AdmitPartRequest Admit(const std::string& job_id) {
  v1::AdmitPartRequest request;
  request.mutable_global_id()->set_coordinator("127.0.0.1:1");
  request.mutable_global_id()->set_job_id(job_id);
  return request;
}

// AdmitPart to `callee`, as kMe.
grpc::Status CallAdmit(v1::Peers::Stub& stub, const std::string& callee, const std::string& job_id,
                       v1::AdmitPartResponse* response = nullptr) {
  grpc::ClientContext context;
  const v1::AdmitPartRequest request = Admit(job_id);
  Prepare(&context, callee, "AdmitPart", request);
  v1::AdmitPartResponse ignored;
  return stub.AdmitPart(&context, request, response != nullptr ? response : &ignored);
}

TEST(PeerServerTest, HelloRoundTripBetweenTwoListeners) {
  std::unique_ptr<PeerServer> a = StartOrDie(nullptr, PeerHello{"host", 4, ""});
  std::unique_ptr<PeerServer> b = StartOrDie(nullptr, PeerHello{"cuda", 8, ""});
  ASSERT_TRUE(a && b);
  EXPECT_THAT(a->listen_address(), StartsWith("127.0.0.1:"));
  EXPECT_NE(a->listen_address(), "127.0.0.1:0");
  EXPECT_NE(a->listen_address(), b->listen_address());
  EXPECT_EQ(a->node_name(), a->listen_address());  // no node_name: the bound address
  EXPECT_FALSE(a->tls());

  std::unique_ptr<v1::Peers::Stub> to_b = StubOrDie(b->listen_address());
  absl::StatusOr<v1::HelloResponse> hello =
      Hello(*to_b, b->listen_address(), PeerIdentity{a->node_name(), kKey}, kCallTimeout);
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_EQ(hello->version(), OVERLAP_VERSION);
  EXPECT_EQ(hello->backend(), "cuda");
  EXPECT_EQ(hello->device_count(), 8);
  EXPECT_EQ(hello->node(), b->listen_address());

  std::unique_ptr<v1::Peers::Stub> to_a = StubOrDie(a->listen_address());
  hello = Hello(*to_a, a->listen_address(), PeerIdentity{b->node_name(), kKey}, kCallTimeout);
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_EQ(hello->backend(), "host");
  EXPECT_EQ(hello->device_count(), 4);
  EXPECT_EQ(hello->node(), a->listen_address());
}

TEST(PeerServerTest, ACallWithoutOrWithAnotherVersionIsFailedPrecondition) {
  FakeHandler handler;
  std::unique_ptr<PeerServer> server = StartOrDie(&handler, PeerHello{"host", 2, ""});
  ASSERT_TRUE(server);
  std::unique_ptr<v1::Peers::Stub> stub = StubOrDie(server->listen_address());
  struct Case {
    const char* version;  // nullptr: no header
    std::string message;
  };
  const std::vector<Case> cases = {
      {nullptr, std::string("the caller sent no overlapd-version header")},
      {"0.0.9", std::string("peer runs overlapd 0.0.9, this daemon ") + OVERLAP_VERSION +
                    ": upgrade them together"},
      {"", std::string("peer runs overlapd , this daemon ") + OVERLAP_VERSION},
      {OVERLAP_VERSION "-rc1", std::string("peer runs overlapd ") + OVERLAP_VERSION + "-rc1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.version == nullptr ? "(none)" : c.version);
    {
      grpc::ClientContext context;
      if (c.version != nullptr) context.AddMetadata(kVersionHeader, c.version);
      v1::AdmitPartResponse response;
      const grpc::Status status = stub->AdmitPart(&context, Admit("j1"), &response);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
      EXPECT_THAT(status.error_message(), HasSubstr(c.message));
    }
    {
      grpc::ClientContext context;
      if (c.version != nullptr) context.AddMetadata(kVersionHeader, c.version);
      v1::HelloResponse response;
      const grpc::Status status = stub->Hello(&context, v1::HelloRequest(), &response);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
      EXPECT_THAT(status.error_message(), HasSubstr(c.message));
    }
  }
  EXPECT_TRUE(handler.calls().empty()) << "a refused call reached the handler";
  // The same stub with the header is let in.
  v1::AdmitPartResponse response;
  const grpc::Status admitted = CallAdmit(*stub, server->node_name(), "j2", &response);
  ASSERT_TRUE(admitted.ok()) << admitted.error_message();
  EXPECT_EQ(response.part_id(), "part-j2");
}

TEST(PeerServerTest, WithoutAHandlerJobCallsAreUnavailable) {
  std::unique_ptr<PeerServer> server = StartOrDie(nullptr, PeerHello{"host", 2, ""});
  ASSERT_TRUE(server);
  std::unique_ptr<v1::Peers::Stub> stub = StubOrDie(server->listen_address());
  std::vector<grpc::Status> statuses = {CallAdmit(*stub, server->node_name(), "j")};
  {
    grpc::ClientContext context;
    Prepare(&context, server->node_name(), "CancelPart", v1::CancelPartRequest());
    v1::CancelPartResponse response;
    statuses.push_back(stub->CancelPart(&context, v1::CancelPartRequest(), &response));
  }
  {
    grpc::ClientContext context;
    Prepare(&context, server->node_name(), "HoldPart", v1::HoldPartRequest());
    v1::HoldPartResponse response;
    statuses.push_back(stub->HoldPart(&context, v1::HoldPartRequest(), &response));
  }
  {
    grpc::ClientContext context;
    Prepare(&context, server->node_name(), "ReportPart", v1::ReportPartRequest());
    v1::ReportPartResponse response;
    statuses.push_back(stub->ReportPart(&context, v1::ReportPartRequest(), &response));
  }
  {
    grpc::ClientContext context;
    Prepare(&context, server->node_name(), "StoreSet", v1::StoreSetRequest());
    v1::StoreSetResponse response;
    statuses.push_back(stub->StoreSet(&context, v1::StoreSetRequest(), &response));
  }
  {
    grpc::ClientContext context;
    Prepare(&context, server->node_name(), "StoreGet", v1::StoreGetRequest());
    v1::StoreGetResponse response;
    statuses.push_back(stub->StoreGet(&context, v1::StoreGetRequest(), &response));
  }
  for (size_t i = 0; i < statuses.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(statuses[i].error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(statuses[i].error_message(), "this daemon runs no cluster jobs");
  }
  // Hello needs no handler.
  EXPECT_TRUE(Hello(*stub, server->listen_address(), kMe, kCallTimeout).ok());
}

TEST(PeerServerTest, TheHandlerGetsTheRequestsAndItsStatusesReachTheCaller) {
  FakeHandler handler;
  std::unique_ptr<PeerServer> server = StartOrDie(&handler, PeerHello{"host", 2, ""});
  ASSERT_TRUE(server);
  std::unique_ptr<v1::Peers::Stub> stub = StubOrDie(server->listen_address());

  {
    grpc::ClientContext context;
    v1::HoldPartRequest request;
    request.set_part_id("p7");
    Prepare(&context, server->node_name(), "HoldPart", request);
    v1::HoldPartResponse response;
    ASSERT_TRUE(stub->HoldPart(&context, request, &response).ok());
    EXPECT_EQ(response.decision(), v1::HoldPartResponse::START);
  }
  {
    grpc::ClientContext context;
    v1::StoreGetRequest request;
    request.set_key("k1");
    Prepare(&context, server->node_name(), "StoreGet", request);
    v1::StoreGetResponse response;
    const grpc::Status status = stub->StoreGet(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.value(), std::string("value\0of k1", 11));  // bytes, NUL included
  }
  const PeerCaller caller = handler.last_caller();
  EXPECT_EQ(caller.node, kMe.node);   // proven with the cluster key
  EXPECT_EQ(caller.tls_subject, "");  // loopback, no TLS
  EXPECT_THAT(caller.peer_uri, StartsWith("ipv4:127.0.0.1:"));

  handler.admit_status = absl::ResourceExhaustedError("node busy: 4 of 4 devices held");
  const grpc::Status refused = CallAdmit(*stub, server->node_name(), "j3");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(refused.error_message(), "node busy: 4 of 4 devices held");
  EXPECT_EQ(handler.calls(),
            (std::vector<std::string>{"HoldPart:p7", "StoreGet:k1", "AdmitPart:j3"}));
}


// Calls that do not prove they come from a daemon holding the cluster key:
// each is UNAUTHENTICATED, and none reaches the handler.
TEST(PeerServerTest, CallsWithoutProofAreUnauthenticated) {
  FakeHandler handler;
  std::unique_ptr<PeerServer> server = StartOrDie(&handler, PeerHello{"host", 2, ""});
  ASSERT_TRUE(server);
  const std::string callee = server->node_name();
  std::unique_ptr<v1::Peers::Stub> stub = StubOrDie(server->listen_address());
  v1::CancelPartRequest cancel;
  cancel.mutable_global_id()->set_coordinator(kMe.node);
  cancel.mutable_global_id()->set_job_id("job-000001");
  v1::CancelPartRequest other = cancel;
  other.mutable_global_id()->set_job_id("job-000002");
  const PeerCallFacts facts{"CancelPart", kMe.node, callee, CanonicalBytes(cancel)};
  struct Case {
    std::string what;
    std::string node;   // overlapd-node; "" = none
    std::string token;  // overlapd-auth; "" = none
    std::string message;
  };
  PeerCallFacts for_other = facts;
  for_other.request_bytes = CanonicalBytes(other);
  PeerCallFacts for_hold = facts;
  for_hold.method = "HoldPart";
  PeerCallFacts for_elsewhere = facts;
  for_elsewhere.callee = "127.0.0.1:2";
  const std::vector<Case> cases = {
      {"no caller", "", SignPeerCall(kKey, facts, absl::Now()), "names no caller"},
      {"a caller that is no address", "me", SignPeerCall(kKey, facts, absl::Now()),
       "names no caller"},
      {"no token", kMe.node, "", "carries no overlapd-auth token"},
      {"garbage", kMe.node, "v1:1:2:3", "malformed overlapd-auth token"},
      {"another key", kMe.node, SignPeerCall("another-cluster-key-0000000000", facts, absl::Now()),
       "was not made with this daemon's cluster key"},
      {"another caller's token", "127.0.0.1:3", SignPeerCall(kKey, facts, absl::Now()),
       "was not made with this daemon's cluster key"},
      {"another request's token", kMe.node, SignPeerCall(kKey, for_other, absl::Now()),
       "was made for another request than the one it carries"},
      {"another method's token", kMe.node, SignPeerCall(kKey, for_hold, absl::Now()),
       "was not made with this daemon's cluster key"},
      {"another callee's token", kMe.node, SignPeerCall(kKey, for_elsewhere, absl::Now()),
       "was not made with this daemon's cluster key"},
      {"an old token", kMe.node, SignPeerCall(kKey, facts, absl::Now() - absl::Minutes(10)),
       "away from this daemon's clock"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    grpc::ClientContext context;
    context.AddMetadata(kVersionHeader, OVERLAP_VERSION);
    if (!c.node.empty()) context.AddMetadata(kNodeHeader, c.node);
    if (!c.token.empty()) context.AddMetadata(kAuthHeader, c.token);
    context.set_deadline(absl::ToChronoTime(absl::Now() + kCallTimeout));
    v1::CancelPartResponse response;
    const grpc::Status status = stub->CancelPart(&context, cancel, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_THAT(status.error_message(), HasSubstr(c.message));
  }
  EXPECT_TRUE(handler.calls().empty()) << "an unproven call reached the handler";
  // Hello is no exception.
  absl::StatusOr<v1::HelloResponse> hello =
      Hello(*stub, server->listen_address(), PeerIdentity{kMe.node, ""}, kCallTimeout);
  EXPECT_EQ(hello.status().code(), absl::StatusCode::kUnauthenticated);
  // The same call with its proof is let in.
  grpc::ClientContext context;
  Prepare(&context, callee, "CancelPart", cancel);
  v1::CancelPartResponse response;
  EXPECT_TRUE(stub->CancelPart(&context, cancel, &response).ok());
  EXPECT_EQ(handler.calls(), std::vector<std::string>{"CancelPart:"});
}

TEST(PeerServerTest, PeerCallsEndAtTheirDeadline) {
  FakeHandler handler;
  std::unique_ptr<PeerServer> server = StartOrDie(&handler, PeerHello{"host", 2, ""});
  ASSERT_TRUE(server);
  std::unique_ptr<v1::Peers::Stub> stub = StubOrDie(server->listen_address());
  grpc::ClientContext context;
  v1::StoreGetRequest request;
  request.set_key("block");
  Prepare(&context, server->node_name(), "StoreGet", request, absl::Milliseconds(200));
  v1::StoreGetResponse response;
  const absl::Time start = absl::Now();
  EXPECT_EQ(stub->StoreGet(&context, request, &response).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  handler.release.Notify();
}

// A Peers service that answers Hello as another overlapd would. Set its
// fields before the first call.
class OtherPeer : public v1::Peers::Service {
 public:
  grpc::Status Hello(grpc::ServerContext*, const v1::HelloRequest*,
                     v1::HelloResponse* response) override {
    response->set_version(version);
    response->set_node(node);
    return grpc::Status::OK;
  }
  std::string version, node;
};

TEST(PeerClientTest, HelloRefusesAnotherVersionOrAnotherName) {
  for (const bool other_version : {true, false}) {
    SCOPED_TRACE(other_version ? "version" : "name");
    OtherPeer service;
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    const std::string address = "127.0.0.1:" + std::to_string(port);
    service.version = other_version ? "0.0.9" : OVERLAP_VERSION;
    service.node = other_version ? address : "gpu-node-7:7000";
    std::unique_ptr<v1::Peers::Stub> stub = StubOrDie(address);
    absl::StatusOr<v1::HelloResponse> hello = Hello(*stub, address, kMe, kCallTimeout);
    EXPECT_EQ(hello.status().code(), absl::StatusCode::kFailedPrecondition);
    if (other_version) {
      EXPECT_EQ(hello.status().message(),
                "peer " + address + " runs overlapd \"0.0.9\", this daemon " +
                    std::string(OVERLAP_VERSION) + ": upgrade them together");
    } else {
      EXPECT_EQ(hello.status().message(),
                "peer " + address +
                    " names itself \"gpu-node-7:7000\": its node_name must be the address this "
                    "daemon lists in peers");
    }
    server->Shutdown();
  }
}

TEST(PeerClientTest, HelloToAnUnreachablePeerNamesIt) {
  // A port nothing listens on: bind one, let it go.
  std::unique_ptr<PeerServer> gone = StartOrDie(nullptr, PeerHello{"host", 1, ""});
  ASSERT_TRUE(gone);
  const std::string address = gone->listen_address();
  gone.reset();
  std::unique_ptr<v1::Peers::Stub> stub = StubOrDie(address);
  absl::StatusOr<v1::HelloResponse> hello = Hello(*stub, address, kMe, absl::Seconds(2));
  EXPECT_THAT(hello.status().code(), ::testing::AnyOf(absl::StatusCode::kUnavailable,
                                                      absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(std::string(hello.status().message()), StartsWith("peer " + address + ": "));
}

TEST(PeerClientTest, CheckListedPeer) {
  DaemonConfig config;
  config.peer_listen = "10.0.0.1:7000";
  config.peers = {"10.0.0.2:7000", "10.0.0.3:7000"};
  EXPECT_TRUE(CheckListedPeer(config, "10.0.0.3:7000").ok());
  const absl::Status refused = CheckListedPeer(config, "10.0.0.9:7000");
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(refused.message(),
            "node 10.0.0.9:7000 is not in this daemon's peers: (10.0.0.2:7000, 10.0.0.3:7000)");
  // As written: another spelling of a listed node is another node.
  EXPECT_EQ(CheckListedPeer(config, "10.0.0.2:07000").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckListedPeer(DaemonConfig(), "10.0.0.2:7000").message(),
            "node 10.0.0.2:7000 is not in this daemon's peers: ()");
}

TEST(PeerServerTest, RefusedAtStart) {
  struct Case {
    std::string listen;
    PeerTls tls;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"0.0.0.0:0",
       {},
       absl::StatusCode::kInvalidArgument,
       "peer_listen: \"0.0.0.0:0\": not a loopback address: daemons off loopback speak mutual "
       "TLS; set peer_tls_cert, peer_tls_key and peer_tls_ca"},
      {"10.255.0.1:7000", {}, absl::StatusCode::kInvalidArgument, "not a loopback address"},
      {"127.0.0.1:0",
       {"cert.pem", "", ""},
       absl::StatusCode::kInvalidArgument,
       "peer_tls_cert, peer_tls_key and peer_tls_ca go together (mutual TLS between daemons); "
       "missing: peer_tls_key, peer_tls_ca"},
      {"127.0.0.1:0",
       {"/nonexistent/c.pem", "/nonexistent/k.pem", "/nonexistent/ca.pem"},
       absl::StatusCode::kInvalidArgument,
       "peer_tls_cert: cannot read /nonexistent/c.pem"},
      {"unix:/tmp/peer.sock",
       {},
       absl::StatusCode::kInvalidArgument,
       "peer_listen: \"unix:/tmp/peer.sock\": peers speak TCP"},
      {"127.0.0.1", {}, absl::StatusCode::kInvalidArgument, "peer_listen: \"127.0.0.1\": "},
      {"", {}, absl::StatusCode::kInvalidArgument, "peer_listen: \"\": empty"},
      {"127.0.0.1:0",
       {},
       absl::StatusCode::kInvalidArgument,
       "the peer port needs a way to tell daemons from anyone else: a cluster key "
       "(peer_key_file) or mutual TLS"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.listen);
    PeerServerOptions options;
    options.listen = c.listen;
    options.tls = c.tls;
    absl::StatusOr<std::unique_ptr<PeerServer>> server =
        PeerServer::Start(options, nullptr, PeerHello{"host", 1, ""});
    ASSERT_FALSE(server.ok());
    EXPECT_EQ(server.status().code(), c.code);
    EXPECT_THAT(std::string(server.status().message()), HasSubstr(c.message));
  }
}

TEST(PeerServerTest, ASecondListenerOnTheSamePortIsRefused) {
  std::unique_ptr<PeerServer> first = StartOrDie(nullptr, PeerHello{"host", 1, ""});
  ASSERT_TRUE(first);
  PeerServerOptions options;
  options.listen = first->listen_address();
  options.cluster_key = kKey;
  absl::StatusOr<std::unique_ptr<PeerServer>> second =
      PeerServer::Start(options, nullptr, PeerHello{"host", 1, ""});
  ASSERT_FALSE(second.ok()) << "two listeners share " << first->listen_address();
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr("peer_listen: cannot listen on " + first->listen_address()));
}

TEST(PeerClientTest, PlainTcpOnlyToLoopback) {
  PeerChannelOptions options;
  for (const char* address : {"127.0.0.1:7000", "localhost:7000", "[::1]:7000"}) {
    EXPECT_TRUE(NewPeerStub(options, address).ok()) << address;
  }
  absl::StatusOr<std::unique_ptr<v1::Peers::Stub>> stub = NewPeerStub(options, "10.0.0.2:7000");
  EXPECT_EQ(stub.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(stub.status().message()),
              HasSubstr("peer: \"10.0.0.2:7000\": not a loopback address: calls to it need "
                        "mutual TLS"));
  EXPECT_EQ(NewPeerStub(options, "127.0.0.1:0").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NewPeerStub(options, "nonsense").status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- Mutual TLS ------------------------------------------------------------

// A CA and two daemons' certificates it signed (each for 127.0.0.1 and
// localhost, for serving and for calling), and a rogue CA with its own.
class Pki {
 public:
  Pki() {
    char pattern[] = "/tmp/ovl-pki-XXXXXX";
    if (const char* made = mkdtemp(pattern)) dir_ = made;
    ok_ = !dir_.empty() &&
          Run("printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n"
              "extendedKeyUsage=serverAuth,clientAuth\\n' > node.ext") &&
          MakeCa("ca") && MakeCa("rogue-ca") && MakeLeaf("node-a", "ca") &&
          MakeLeaf("node-b", "ca") && MakeLeaf("rogue", "rogue-ca");
  }
  ~Pki() {
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }
  bool ok() const { return ok_; }
  std::string File(const std::string& name) const { return dir_ + "/" + name; }
  PeerTls Tls(const std::string& leaf, const std::string& ca = "ca") const {
    return PeerTls{File(leaf + ".pem"), File(leaf + ".key"), File(ca + ".pem")};
  }
  std::string Read(const std::string& name) const {
    std::ifstream in(File(name));
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  bool Run(const std::string& command) const { return overlap::testing::RunInDir(dir_, command); }
  bool MakeCa(const std::string& name) const { return overlap::testing::MakeTestCa(dir_, name); }
  bool MakeLeaf(const std::string& name, const std::string& ca) const {
    return overlap::testing::MakeTestLeaf(dir_, name, ca, "node.ext", "/O=overlap/CN=" + name);
  }

  std::string dir_;
  bool ok_ = false;
};

class PeerTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "the openssl CLI is not installed (scripts/install-deps.sh installs it)";
    }
    ASSERT_TRUE(pki_.ok()) << "openssl could not make the test certificates";
  }

  // AdmitPart over a channel with `credentials`.
  grpc::Status AdmitWith(const std::string& address,
                         std::shared_ptr<grpc::ChannelCredentials> credentials) {
    std::unique_ptr<v1::Peers::Stub> stub =
        v1::Peers::NewStub(grpc::CreateChannel(address, credentials));
    grpc::ClientContext context;
    Prepare(&context, address, "AdmitPart", Admit("tls"), absl::Seconds(5));
    v1::AdmitPartResponse response;
    return stub->AdmitPart(&context, Admit("tls"), &response);
  }

  Pki pki_;
};

TEST_F(PeerTlsTest, APeerWithACertificateFromTheCaIsLetInAndNamed) {
  FakeHandler handler;
  std::unique_ptr<PeerServer> server =
      StartOrDie(&handler, PeerHello{"host", 2, ""}, pki_.Tls("node-a"));
  ASSERT_TRUE(server);
  EXPECT_TRUE(server->tls());
  std::unique_ptr<v1::Peers::Stub> stub = StubOrDie(server->listen_address(), pki_.Tls("node-b"));
  v1::AdmitPartResponse response;
  const grpc::Status admitted = CallAdmit(*stub, server->node_name(), "j1", &response);
  ASSERT_TRUE(admitted.ok()) << admitted.error_message();
  EXPECT_EQ(response.part_id(), "part-j1");
  EXPECT_EQ(handler.last_caller().tls_subject, "CN=node-b,O=overlap");
  absl::StatusOr<v1::HelloResponse> hello =
      Hello(*stub, server->listen_address(), PeerIdentity{"localhost:9", kKey}, kCallTimeout);
  EXPECT_TRUE(hello.ok()) << hello.status();
}

TEST_F(PeerTlsTest, CallersWithoutACertificateFromTheCaAreRefused) {
  FakeHandler handler;
  std::unique_ptr<PeerServer> server =
      StartOrDie(&handler, PeerHello{"host", 2, ""}, pki_.Tls("node-a"));
  ASSERT_TRUE(server);
  const std::string address = server->listen_address();
  grpc::SslCredentialsOptions no_certificate;
  no_certificate.pem_root_certs = pki_.Read("ca.pem");
  grpc::SslCredentialsOptions rogue_certificate = no_certificate;
  rogue_certificate.pem_cert_chain = pki_.Read("rogue.pem");
  rogue_certificate.pem_private_key = pki_.Read("rogue.key");
  grpc::SslCredentialsOptions distrusts_server;  // a good certificate, the wrong CA
  distrusts_server.pem_root_certs = pki_.Read("rogue-ca.pem");
  distrusts_server.pem_cert_chain = pki_.Read("node-b.pem");
  distrusts_server.pem_private_key = pki_.Read("node-b.key");
  const std::vector<std::pair<std::string, std::shared_ptr<grpc::ChannelCredentials>>> refused = {
      {"plaintext", grpc::InsecureChannelCredentials()},
      {"no client certificate", grpc::SslCredentials(no_certificate)},
      {"certificate from another CA", grpc::SslCredentials(rogue_certificate)},
      {"server not trusted", grpc::SslCredentials(distrusts_server)},
  };
  for (const auto& [what, credentials] : refused) {
    SCOPED_TRACE(what);
    EXPECT_EQ(AdmitWith(address, credentials).error_code(), grpc::StatusCode::UNAVAILABLE);
  }
  EXPECT_TRUE(handler.calls().empty()) << "a refused caller reached the handler";
  // The listener still serves a good peer after the refused handshakes.
  std::unique_ptr<v1::Peers::Stub> good = StubOrDie(address, pki_.Tls("node-b"));
  EXPECT_TRUE(CallAdmit(*good, address, "after").ok());
}


// A node with a good certificate that speaks as another node: its
// certificate does not name that node, so the call is UNAUTHENTICATED.
TEST_F(PeerTlsTest, ACertifiedNodeCannotSpeakAsAnother) {
  FakeHandler handler;
  std::unique_ptr<PeerServer> server = StartOrDie(&handler, PeerHello{"host", 2, ""},
                                                  pki_.Tls("node-a"), "127.0.0.1:0", /*key=*/"");
  ASSERT_TRUE(server);
  std::unique_ptr<v1::Peers::Stub> stub = StubOrDie(server->listen_address(), pki_.Tls("node-b"));
  const v1::AdmitPartRequest request = Admit("j1");
  for (const std::string claimed : {"10.9.9.9:7000", "node-a.example:7000"}) {
    SCOPED_TRACE(claimed);
    grpc::ClientContext context;
    PreparePeerContext(&context, kCallTimeout, PeerIdentity{claimed, ""}, "AdmitPart",
                       server->node_name(), request);
    v1::AdmitPartResponse response;
    const grpc::Status status = stub->AdmitPart(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_THAT(status.error_message(),
                HasSubstr("the caller's certificate (CN=node-b) does not name the node " + claimed));
  }
  EXPECT_TRUE(handler.calls().empty());
  // As the node its certificate names (localhost, 127.0.0.1), it is let in, on TLS alone.
  grpc::ClientContext context;
  PreparePeerContext(&context, kCallTimeout, PeerIdentity{"localhost:7001", ""}, "AdmitPart",
                     server->node_name(), request);
  v1::AdmitPartResponse response;
  const grpc::Status status = stub->AdmitPart(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(handler.last_caller().node, "localhost:7001");
}

// The listener follows its certificate files: a renewed certificate is served
// from the next reload on, without a restart (here it first holds one from a
// CA its peers do not trust, so the handshake fails until the files change).
TEST_F(PeerTlsTest, ARenewedCertificateIsServedWithoutARestart) {
  const std::string live = pki_.File("live");
  std::filesystem::create_directories(live);
  const auto install = [&](const std::string& leaf) {
    for (const std::string ext : {".pem", ".key"}) {
      std::ofstream(live + "/next" + ext) << pki_.Read(leaf + ext);
      std::filesystem::rename(live + "/next" + ext, live + "/node" + ext);
    }
  };
  std::ofstream(live + "/ca.pem") << pki_.Read("ca.pem");
  install("rogue");
  const PeerTls tls{live + "/node.pem", live + "/node.key", live + "/ca.pem", /*reload_s=*/1};
  FakeHandler handler;
  std::unique_ptr<PeerServer> server = StartOrDie(&handler, PeerHello{"host", 2, ""}, tls);
  ASSERT_TRUE(server);
  std::unique_ptr<v1::Peers::Stub> stub = StubOrDie(server->listen_address(), pki_.Tls("node-b"));
  EXPECT_EQ(CallAdmit(*stub, server->node_name(), "before").error_code(),
            grpc::StatusCode::UNAVAILABLE);
  install("node-a");
  grpc::Status status;
  for (int i = 0; i < 100; ++i) {
    status = CallAdmit(*stub, server->node_name(), absl::StrCat("after-", i));
    if (status.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(status.ok()) << "the renewed certificate was not served: " << status.error_message();
}

TEST_F(PeerTlsTest, MutualTlsLetsTheListenerOffLoopback) {
  std::unique_ptr<PeerServer> server = StartOrDie(
      nullptr, PeerHello{"host", 2, "node-a.example:7000"}, pki_.Tls("node-a"), "0.0.0.0:0");
  ASSERT_TRUE(server);
  EXPECT_THAT(server->listen_address(), StartsWith("0.0.0.0:"));
  EXPECT_EQ(server->node_name(), "node-a.example:7000");
  const std::string port = server->listen_address().substr(server->listen_address().rfind(':'));
  std::unique_ptr<v1::Peers::Stub> stub = StubOrDie("127.0.0.1" + port, pki_.Tls("node-b"));
  grpc::ClientContext context;
  Prepare(&context, server->node_name(), "Hello", v1::HelloRequest());
  v1::HelloResponse response;
  const grpc::Status status = stub->Hello(&context, v1::HelloRequest(), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.node(), "node-a.example:7000");
}

}  // namespace
}  // namespace overlap::peer
