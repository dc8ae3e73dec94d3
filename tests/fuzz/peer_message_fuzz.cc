// Fuzz target: the peer protocol's requests as another daemon (or anyone who
// reaches the peer port) sends them (proto/overlap/v1/peer.proto). The first
// byte picks the message: AdmitPart, CancelPart, HoldPart, ReportPart,
// StoreSet, StoreGet; the rest is its wire bytes. An AdmitPart's spec goes
// through what a node admits a part by (jobs::Admission::AdmitSpan) on a host
// engine of 4 devices.
//
// Rules: any bytes come back as a refusal or a message; every message parsed
// serializes and parses back to the same bytes; AdmitSpan refuses with
// INVALID_ARGUMENT (a bad graph or node list) or RESOURCE_EXHAUSTED (does not
// fit), and a span it admits lies on this node's devices, world = nodes x them.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "overlap/v1/peer.pb.h"
#include "server/engine/host/host_engine.h"
#include "server/jobs/admission.h"
#include "server/wire/peer_wire.h"
#include "tests/fuzz/fuzz_check.h"

namespace overlap::fuzz {
namespace {

constexpr int kDevices = 4;

struct Node {
  Node() {
    // Bytes that are not UTF-8 in a string field are refused; protobuf would
    // also log each one.
    google::protobuf::SetLogHandler(nullptr);
    engine::HostEngineOptions options;
    options.device_count = kDevices;
    host = std::move(engine::CreateHostEngine(options)).value();
    admission = std::make_unique<jobs::Admission>(*host, jobs::AdmissionOptions{});
  }
  std::unique_ptr<engine::Engine> host;
  std::unique_ptr<jobs::Admission> admission;
};

// Map fields (a report's library_env) serialize in no fixed order otherwise.
std::string DeterministicBytes(const google::protobuf::Message& message) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream out(&stream);
    out.SetSerializationDeterministic(true);
    FUZZ_CHECK(message.SerializeToCodedStream(&out));
  }
  return bytes;
}

template <typename Request>
bool ParseAndRoundTrip(absl::string_view wire, Request* request) {
  if (!request->ParseFromArray(wire.data(), static_cast<int>(wire.size()))) return false;
  const std::string bytes = request->SerializeAsString();
  Request again;
  FUZZ_CHECK(again.ParseFromString(bytes));
  FUZZ_CHECK(DeterministicBytes(again) == DeterministicBytes(*request));
  return true;
}

void Admit(const Node& node, const v1::AdmitPartRequest& message) {
  // As the peer listener reads it (wire::FromProto), then a part admits it
  // (PartHost::PartGraph): the graph, checked with the coordinator's decisions.
  absl::StatusOr<jobs::GraphPtr> span;
  const absl::StatusOr<peer::PartRequest> request = wire::FromProto(message);
  absl::StatusOr<JobSpec> spec =
      request.ok() ? node.admission->Parse(request->spec, request->global_id.Key())
                   : request.status();
  if (spec.ok()) {
    span = node.admission->AdmitSpan(std::move(*spec), request->nodes, &request->schedules,
                                     &request->notes);
  } else {
    span = spec.status();
  }
  const std::vector<std::string> nodes(message.nodes().begin(), message.nodes().end());
  if (!span.ok()) {
    FUZZ_CHECK(span.status().code() == absl::StatusCode::kInvalidArgument ||
               span.status().code() == absl::StatusCode::kResourceExhausted ||
               span.status().code() == absl::StatusCode::kFailedPrecondition);
    return;
  }
  const jobs::AdmittedGraph& graph = **span;
  // Every op runs a schedule the coordinator sent, and only those.
  FUZZ_CHECK(graph.schedules == request->schedules);
  FUZZ_CHECK(graph.schedules.size() == graph.spec.ops.size());
  for (const OpSpec& op : graph.spec.ops) FUZZ_CHECK(graph.schedules.count(op.id) == 1);
  FUZZ_CHECK(!graph.spec.nodes.empty());
  FUZZ_CHECK(nodes.empty() || graph.spec.nodes == nodes);
  FUZZ_CHECK(!graph.devices.empty());
  for (int device : graph.devices) FUZZ_CHECK(device >= 0 && device < kDevices);
  FUZZ_CHECK(graph.world == static_cast<int>(graph.spec.nodes.size() * graph.devices.size()));
}

}  // namespace
}  // namespace overlap::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace overlap;
  static const fuzz::Node* const node = new fuzz::Node();
  if (size < 1) return 0;
  const absl::string_view wire(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 6) {
    case 0: {
      v1::AdmitPartRequest request;
      if (fuzz::ParseAndRoundTrip(wire, &request)) fuzz::Admit(*node, request);
      break;
    }
    case 1: {
      v1::CancelPartRequest request;
      if (fuzz::ParseAndRoundTrip(wire, &request)) wire::FromProto(request);
      break;
    }
    case 2: {
      v1::HoldPartRequest request;
      if (fuzz::ParseAndRoundTrip(wire, &request)) wire::FromProto(request);
      break;
    }
    case 3: {
      v1::ReportPartRequest request;
      if (fuzz::ParseAndRoundTrip(wire, &request)) wire::FromProto(request);
      break;
    }
    case 4: {
      v1::StoreSetRequest request;
      if (fuzz::ParseAndRoundTrip(wire, &request)) wire::FromProto(request);
      break;
    }
    case 5: {
      v1::StoreGetRequest request;
      if (fuzz::ParseAndRoundTrip(wire, &request)) wire::FromProto(request);
      break;
    }
  }
  return 0;
}
