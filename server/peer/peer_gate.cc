#include "server/peer/peer_gate.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/peer/peer_config.h"

namespace overlap::peer {
namespace {

// The most of a caller's version header quoted back.
constexpr size_t kMaxQuotedVersion = 64;
// A caller names itself in at most this many bytes.
constexpr size_t kMaxNodeNameBytes = 256;

// The metadata value under `key`, "" when absent.
absl::string_view Header(const grpc::AuthMetadataProcessor::InputMetadata& metadata,
                         absl::string_view key) {
  const auto it = metadata.find(grpc::string_ref(key.data(), key.size()));
  return it == metadata.end() ? absl::string_view()
                              : absl::string_view(it->second.data(), it->second.size());
}

absl::Status CheckVersion(const grpc::AuthMetadataProcessor::InputMetadata& metadata) {
  if (metadata.find(kVersionHeader) == metadata.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the caller sent no ", kVersionHeader,
                     " header (not overlapd, or an overlapd older than "
                     "the peer protocol); this daemon runs overlapd ",
                     OVERLAP_VERSION, ": daemons of a cluster must run one version"));
  }
  const absl::string_view sent = Header(metadata, kVersionHeader);
  if (sent == OVERLAP_VERSION) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("peer runs overlapd ", absl::CHexEscape(sent.substr(0, kMaxQuotedVersion)),
                   ", this daemon ", OVERLAP_VERSION, ": upgrade them together"));
}

// "/overlap.v1.Peers/AdmitPart" -> "AdmitPart".
absl::string_view MethodOf(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

// The first value of an auth context property, "" when absent.
std::string Property(const grpc::AuthContext& auth, const char* name) {
  for (const grpc::string_ref& value : auth.FindPropertyValues(name)) {
    if (value.size() > 0) return std::string(value.data(), value.size());
  }
  return "";
}

PeerCertificate CertificateOf(const grpc::AuthContext& auth) {
  PeerCertificate certificate;
  certificate.common_name = Property(auth, "x509_common_name");
  for (const grpc::string_ref& value : auth.FindPropertyValues("x509_subject_alternative_name")) {
    certificate.subject_alt_names.emplace_back(value.data(), value.size());
  }
  return certificate;
}

}  // namespace

void PeerGate::set_node_name(const std::string& name) {
  absl::MutexLock lock(&mu_);
  node_name_ = name;
}

std::string PeerGate::node_name() {
  absl::MutexLock lock(&mu_);
  return node_name_;
}

grpc::Status PeerGate::Process(const InputMetadata& metadata, grpc::AuthContext* context,
                               OutputMetadata* /*consumed*/, OutputMetadata* /*response*/) {
  const absl::string_view method = MethodOf(Header(metadata, ":path"));
  const absl::StatusOr<ProvenCall> proven = Verify(metadata, method, *context, /*take_nonce=*/true);
  if (proven.ok()) return grpc::Status::OK;
  // Logged here, since the caller may show the message to no one: a cluster of
  // mixed versions or keys is the operator's to fix, and a refused stranger is
  // worth knowing of.
  const absl::string_view node = Header(metadata, kNodeHeader);
  GetLogger("peer")->warn("refused {} from {}: {}", std::string(method.substr(0, 64)),
                          node.empty() ? std::string("a caller that names no node")
                                       : absl::CHexEscape(node.substr(0, kMaxNodeNameBytes)),
                          std::string(proven.status().message()));
  return grpc::Status(static_cast<grpc::StatusCode>(proven.status().code()),
                      std::string(proven.status().message()));
}

absl::StatusOr<ProvenCall> PeerGate::Verify(const InputMetadata& metadata, absl::string_view method,
                                            const grpc::AuthContext& auth, bool take_nonce) {
  RETURN_IF_ERROR(CheckVersion(metadata));
  ProvenCall proven;
  proven.node = std::string(Header(metadata, kNodeHeader));
  if (proven.node.empty() || proven.node.size() > kMaxNodeNameBytes ||
      !ParsePeerAddress("caller", proven.node, /*allow_port_zero=*/false).ok()) {
    return absl::UnauthenticatedError(
        absl::StrCat("the call names no caller as HOST:PORT in its ", kNodeHeader, " header"));
  }
  if (!options_.cluster_key.empty()) {
    std::string public_key;
    if (!options_.known_nodes.empty()) {
      const auto known = options_.known_nodes.find(proven.node);
      if (known == options_.known_nodes.end()) {
        return absl::UnauthenticatedError(
            absl::StrCat("node ", absl::CHexEscape(proven.node),
                         " has no key in this daemon's peer_known_nodes_file: add its line (NODE "
                         "PUBLIC_KEY, from `overlapd --make-node-key`)"));
      }
      public_key = known->second;
    }
    const absl::Time now = absl::Now();
    ASSIGN_OR_RETURN(proven.token,
                     VerifyPeerToken(options_.cluster_key, public_key, method, proven.node,
                                     node_name(), Header(metadata, kAuthHeader), now));
    if (take_nonce) RETURN_IF_ERROR(nonces_.Remember(proven.token->nonce, proven.token->time, now));
  }
  if (options_.tls) {
    if (!auth.IsPeerAuthenticated()) {
      return absl::UnauthenticatedError("the call came without a client certificate");
    }
    RETURN_IF_ERROR(CheckCertificateNamesNode(CertificateOf(auth), proven.node));
  }
  return proven;
}

}  // namespace overlap::peer
