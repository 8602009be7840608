// Revocation for the daemons' mutual TLS: the certificates ppcoord and ppworker refuse although
// their CA signed them (--deny_certs=FILE, docs/security.md "Revoking a certificate"). A CRL would
// need the CA's key at each revocation; a list of fingerprints needs only the certificate.
//
// The file: one SHA-256 fingerprint of a certificate's DER a line, 64 hex digits in either case,
// colons between the bytes allowed, optionally after "sha256 Fingerprint=" (so the output of
// `openssl x509 -in CERT -noout -fingerprint -sha256` is a line); '#' starts a comment, blank lines
// are skipped. At most 1 MiB.
//
// Contract:
// - Load: an empty path is a list that denies nothing (Reload then changes nothing). A file that
//   cannot be read or has a bad line is InvalidArgument naming "--deny_certs=PATH" and the line.
// - Reload reads the file again. On success the new list holds for every later check; on failure
//   the old one stays and the error says so. Either way one line to log.
// - Check: UNAUTHENTICATED naming `method`, the certificate's CN and fingerprint when `peer` (a
//   call's verified client certificate, common::VerifiedPeer) is listed; OK otherwise.
// Thread-safe: Check and Denies from any thread, concurrently with Reload.
#ifndef PP_COMMON_CERT_DENY_LIST_H_
#define PP_COMMON_CERT_DENY_LIST_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/tls.h"

namespace pp::common {

class CertDenyList {
 public:
  using Fingerprints = absl::flat_hash_set<std::string>;  // lowercase hex, no colons

  static absl::StatusOr<std::shared_ptr<CertDenyList>> Load(const std::string& path);
  // The fingerprints of `text`; `source` names it in errors ("--deny_certs=/etc/pp/deny").
  static absl::StatusOr<Fingerprints> Parse(absl::string_view text, absl::string_view source);

  // The line to log: what is denied now, or why the old list stays.
  absl::StatusOr<std::string> Reload();

  bool Denies(absl::string_view fingerprint) const;
  absl::Status Check(const PeerCert& peer, absl::string_view method) const;

 private:
  explicit CertDenyList(std::string path) : path_(std::move(path)) {}
  absl::StatusOr<Fingerprints> Read() const;

  const std::string path_;
  mutable absl::Mutex mu_;
  Fingerprints denied_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pp::common

#endif  // PP_COMMON_CERT_DENY_LIST_H_
