// What this daemon's own peer certificate says of it, read when it starts, so
// that a certificate its peers would refuse (it does not name this node, or it
// has expired) stops the daemon with the reason at once instead of failing
// the first job that spans daemons.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/peer/peer_auth.h"

namespace overlap::peer {

struct CertificateFacts {
  PeerCertificate names;  // common name, DNS and IP subjectAltNames
  absl::Time not_after;
};

// The first certificate of the PEM chain `pem`. INVALID_ARGUMENT when it holds
// none that parses.
absl::StatusOr<CertificateFacts> ReadCertificateFacts(const std::string& pem);

// OK when the certificate in `pem` (from `file`) names `node` (HOST:PORT) as a
// peer checks it (CheckCertificateNamesNode) and is valid at `now`;
// INVALID_ARGUMENT naming peer_tls_cert, the names it holds and how to fix it
// otherwise. A wildcard host (0.0.0.0, [::]) is not checked: no peer calls it
// by that name.
absl::Status CheckOwnCertificate(const std::string& pem, const std::string& file,
                                 const std::string& node, absl::Time now);

}  // namespace overlap::peer
