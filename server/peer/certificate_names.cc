#include "server/peer/certificate_names.h"

#include <arpa/inet.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace overlap::peer {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct NamesFree {
  void operator()(GENERAL_NAMES* n) const { GENERAL_NAMES_free(n); }
};

std::string Text(const ASN1_STRING* s) {
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                     static_cast<size_t>(ASN1_STRING_length(s)));
}

// An IP subjectAltName as text, as gRPC reports it to the callee.
std::string IpText(const ASN1_OCTET_STRING* ip) {
  char out[INET6_ADDRSTRLEN] = {};
  const int family = ASN1_STRING_length(ip) == 4 ? AF_INET : AF_INET6;
  if (ASN1_STRING_length(ip) != 4 && ASN1_STRING_length(ip) != 16) return "";
  return inet_ntop(family, ASN1_STRING_get0_data(ip), out, sizeof(out)) != nullptr ? out : "";
}

std::string HostOf(const std::string& node) {
  const size_t colon = node.rfind(':');
  std::string host = node.substr(0, colon == std::string::npos ? node.size() : colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

}  // namespace

absl::StatusOr<CertificateFacts> ReadCertificateFacts(const std::string& pem) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  std::unique_ptr<X509, X509Free> cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)
                                           : nullptr);
  if (cert == nullptr) return absl::InvalidArgumentError("no certificate that parses");
  CertificateFacts facts;
  X509_NAME* subject = X509_get_subject_name(cert.get());
  if (const int at = X509_NAME_get_index_by_NID(subject, NID_commonName, -1); at >= 0) {
    facts.names.common_name = Text(X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, at)));
  }
  std::unique_ptr<GENERAL_NAMES, NamesFree> names(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr)));
  for (int i = 0; names != nullptr && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    if (name->type == GEN_DNS) facts.names.subject_alt_names.push_back(Text(name->d.dNSName));
    if (name->type == GEN_IPADD) {
      if (std::string ip = IpText(name->d.iPAddress); !ip.empty()) {
        facts.names.subject_alt_names.push_back(std::move(ip));
      }
    }
  }
  // Seconds from now to notAfter, turned into a time.
  int days = 0, seconds = 0;
  if (ASN1_TIME_diff(&days, &seconds, nullptr, X509_get0_notAfter(cert.get())) != 1) {
    return absl::InvalidArgumentError("its notAfter time does not parse");
  }
  facts.not_after = absl::Now() + absl::Hours(24) * days + absl::Seconds(seconds);
  return facts;
}

absl::Status CheckOwnCertificate(const std::string& pem, const std::string& file,
                                 const std::string& node, absl::Time now) {
  absl::StatusOr<CertificateFacts> facts = ReadCertificateFacts(pem);
  if (!facts.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer_tls_cert: ", file, ": ", facts.status().message()));
  }
  if (facts->not_after < now) {
    return absl::InvalidArgumentError(absl::StrCat(
        "peer_tls_cert: ", file, " expired at ",
        absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", facts->not_after, absl::UTCTimeZone()),
        ": peers refuse it; install a renewed certificate"));
  }
  const std::string host = HostOf(node);
  if (host.empty() || host == "0.0.0.0" || host == "::") return absl::OkStatus();
  if (CheckCertificateNamesNode(facts->names, node).ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "peer_tls_cert: ", file, " names CN=", facts->names.common_name.substr(0, 100),
      facts->names.subject_alt_names.empty()
          ? ", no subjectAltName"
          : absl::StrCat(", subjectAltName ", absl::StrJoin(facts->names.subject_alt_names, ", ")),
      "; not this node (node_name ", node,
      "), so its peers would refuse every call it makes. "
      "Issue it with subjectAltName DNS:",
      host, " (or IP:", host, " for an address)"));
}

}  // namespace overlap::peer
