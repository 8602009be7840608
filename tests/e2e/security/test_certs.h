// Certificates for the security tests, made with the openssl command line tool: a CA, and
// certificates it signs for a name (CN=NAME, subject alternative names NAME, localhost and
// 127.0.0.1, so that one certificate serves a loopback daemon and a client alike; only the CN
// names the holder). An admin certificate's subject adds OU=pipeline-admin (coordinator/auth.h).
// Contract: files land in `dir` as NAME.crt and NAME.key (PEM, unencrypted keys); an openssl
// failure is an error carrying its stderr. Each call runs openssl within a bounded time.
#ifndef PP_TESTS_E2E_SECURITY_TEST_CERTS_H_
#define PP_TESTS_E2E_SECURITY_TEST_CERTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "tests/support/cluster.h"

namespace pp::security_test {

struct CertFiles {
  std::string cert, key;
};

// A self-signed CA named `name`.
absl::Status MakeCa(const std::string& dir, const std::string& name);
// A certificate for `name` signed by CA `ca` (made by MakeCa in the same folder).
absl::Status MakeCert(const std::string& dir, const std::string& ca, const std::string& name);
// The same with OU=pipeline-admin: an admin on ppcoord's job API without a token.
absl::Status MakeAdminCert(const std::string& dir, const std::string& ca, const std::string& name);

// Folder `dir` (created) with CA "ca", a certificate for each of `names` and an admin certificate
// (MakeAdminCert) for each of `admins`, all signed by "ca".
absl::Status MakeCertFolder(const std::string& dir, const std::vector<std::string>& names,
                            const std::vector<std::string>& admins);
// The line `openssl x509 -noout -fingerprint -sha256` prints for `name`'s certificate, as an
// operator adds it to a --deny_certs file.
absl::StatusOr<std::string> FingerprintLine(const std::string& dir, const std::string& name);

inline CertFiles Files(const std::string& dir, const std::string& name) {
  return {dir + "/" + name + ".crt", dir + "/" + name + ".key"};
}

// The TLS flags of a daemon holding `name`'s certificate from `dir`, trusting its CA "ca".
std::vector<std::string> TlsFlags(const std::string& dir, const std::string& name);

// TLS trusting CA `ca` of `dir`, with `cert`'s client certificate (none when empty) and `token`
// as a bearer token (none when empty). A file that does not load fails the calling test.
std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(const std::string& dir,
                                                            const std::string& cert,
                                                            const std::string& token,
                                                            const std::string& ca = "ca");

// The folder of the daemons under test: $PP_TEST_BIN_DIR when set, else PP_BIN_DIR (the build's).
// Each security test was seen failing on the binaries before its fix by running it with
// PP_TEST_BIN_DIR naming a folder of those (docs/testing.md "Security tests").
std::string BinDir();

// What a secure test cluster is: ppcoord with the "ppcoord" certificate and `coordinator_flags`
// more, data and checkpoints confined to `root` on every daemon, fast failure detection, the
// harness's stub dialling with `credentials`, and `workers` workers w0, w1, ... each with its own
// certificate and `worker_flags` more (all from `certs`, the cluster's files under `cluster_dir`).
struct SecureCluster {
  std::string certs, root, cluster_dir, bin_dir;
  std::vector<std::string> coordinator_flags, worker_flags;
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  int workers = 0;
};
absl::StatusOr<std::unique_ptr<testing_support::Cluster>> StartSecureCluster(
    const SecureCluster& secure);

}  // namespace pp::security_test

#endif  // PP_TESTS_E2E_SECURITY_TEST_CERTS_H_
