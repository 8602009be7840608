// TLS for the daemons and ppctl: PEM files in, gRPC SSL credentials out, and who the peer of a
// call is. Only gRPC's SSL credentials and OpenSSL do crypto here.
// Contract:
// - LoadTls reads the three PEM files of --tls_cert, --tls_key and --tls_ca and checks them with
//   OpenSSL (each parses, the key matches the certificate); a problem is InvalidArgument naming
//   the flag and the file. TlsPaths with no path set means "no TLS"; some but not all set is
//   InvalidArgument too. ppctl may leave cert and key empty (LoadTls with `need_cert` false).
// - ServerCredentials: the CA verifies every client certificate that is presented. `require`
//   (ppworker: only ppcoord calls it) refuses a handshake without one; otherwise (ppcoord: users
//   with tokens call it too) a client may present none and the service decides.
// - Identity is one field: a peer is named by the subject common name (CN) of its verified
//   client certificate, and by nothing else. Subject alternative names are only for the TLS host
//   check (every recipe certificate carries localhost and 127.0.0.1; as names they would let any
//   worker pass for "localhost"). VerifiedPeer: that certificate's CN, subject OUs and SHA-256
//   fingerprint; nullopt without TLS or without a verified certificate. PeerName: its CN or "".
//   PeerIs: PeerName is `name` (never for an empty name).
// - CheckListenAddress: a daemon without TLS listens only on loopback (127.0.0.0/8, ::1, or a
//   name such as localhost resolving to those only: common/loopback.h) unless `insecure`; then it
//   writes one warning line to stderr.
// Thread-safe: pure functions of their inputs (and the files).
#ifndef PP_COMMON_TLS_H_
#define PP_COMMON_TLS_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"

namespace pp::common {

struct TlsPaths {
  std::string cert, key, ca;  // PEM files
  bool empty() const { return cert.empty() && key.empty() && ca.empty(); }
};

struct TlsConfig {
  std::string cert_pem, key_pem, ca_pem;  // cert and key may be empty for a client
  std::string common_name;                // of cert_pem; empty without one
};

// `flag_prefix` names the flags in errors: "tls_" (--tls_cert) for the daemons, "" for ppctl.
absl::StatusOr<TlsConfig> LoadTls(const TlsPaths& paths, bool need_cert = true,
                                  absl::string_view flag_prefix = "tls_");

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsConfig& tls, bool require);
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const TlsConfig& tls);

// A call's verified client certificate, as the daemons judge it.
struct PeerCert {
  std::string name;                // subject CN: the peer's one identity
  std::vector<std::string> units;  // subject OUs (coordinator/auth.h: which mark an admin)
  std::string fingerprint;         // SHA-256 of the DER, lowercase hex (common/cert_deny_list.h)
};
std::optional<PeerCert> VerifiedPeer(const grpc::ServerContext& context);
// The same of a PEM certificate; nullopt when it does not parse.
std::optional<PeerCert> PeerCertOf(const std::string& pem);
std::string PeerName(const grpc::ServerContext& context);
bool PeerIs(const grpc::ServerContext& context, absl::string_view name);

absl::Status CheckListenAddress(absl::string_view program, absl::string_view flag,
                                absl::string_view address, bool tls, bool insecure);

// Whether HOST:PORT names a loopback host (common/loopback.h); false when malformed.
bool IsLoopbackAddress(absl::string_view address);

// A daemon reachable from other machines must say which folders a job may name: on a
// non-loopback `grpc_address`, each of `roots_flags` (e.g. "data_root") whose `roots` is empty is
// InvalidArgument, unless `insecure`.
absl::Status CheckRootsGiven(
    absl::string_view grpc_address, bool insecure,
    const std::vector<std::pair<const char*, const std::vector<std::string>*>>& roots_flags);

// A daemon's start: CheckListenAddress for --grpc, then LoadTls when `paths` name any file. The
// TLS to serve with; nullopt: plaintext.
absl::StatusOr<std::optional<TlsConfig>> LoadDaemonTls(absl::string_view program,
                                                       absl::string_view grpc_address,
                                                       const TlsPaths& paths, bool insecure);

}  // namespace pp::common

#endif  // PP_COMMON_TLS_H_
