// Certificates for the security tests, made with the openssl command line tool: a CA, and
// certificates it signs for a name (CN=NAME, subject alternative names NAME, localhost and
// 127.0.0.1, so that one certificate serves a loopback daemon and a client alike).
// Contract: files land in `dir` as NAME.crt and NAME.key (PEM, unencrypted keys); an openssl
// failure is an error carrying its stderr. Each call runs openssl within a bounded time.
#ifndef PP_TESTS_E2E_SECURITY_TEST_CERTS_H_
#define PP_TESTS_E2E_SECURITY_TEST_CERTS_H_

#include <string>

#include "absl/status/status.h"

namespace pp::security_test {

struct CertFiles {
  std::string cert, key;
};

// A self-signed CA named `name`.
absl::Status MakeCa(const std::string& dir, const std::string& name);
// A certificate for `name` signed by CA `ca` (made by MakeCa in the same folder).
absl::Status MakeCert(const std::string& dir, const std::string& ca, const std::string& name);

inline CertFiles Files(const std::string& dir, const std::string& name) {
  return {dir + "/" + name + ".crt", dir + "/" + name + ".key"};
}

}  // namespace pp::security_test

#endif  // PP_TESTS_E2E_SECURITY_TEST_CERTS_H_
