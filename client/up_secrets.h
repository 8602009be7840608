// The throw-away secrets of one `ppctl up` run, so that even the laptop default runs secure: a CA,
// a certificate it signs for each daemon and for ppctl itself, and an admin token, all made with
// OpenSSL's C API (no hand-written crypto) under `dir`.
// Contract: MakeUpSecrets(dir, names, admins) writes dir/ca.crt, dir/NAME.crt and dir/NAME.key for
// each of `names` and `admins` (CN=NAME; subject alternative names NAME, localhost and 127.0.0.1:
// every daemon of ppctl up listens on loopback; an admin's subject also has OU=pipeline-admin, the
// mark of an admin client certificate, coordinator/auth.h), dir/tokens (ppcoord's --auth_tokens:
// one admin line) and dir/token (the token alone, for ppctl --token_file); with `view_token` also
// a second line of role view (read only, NAME viewer) and dir/view-token (that token alone: what
// `ppctl up --view_token` offers for dashboards and tests of the roles). Keys and token files are
// created 0600, in `dir` made 0700; a `dir` another user owns is refused (FailedPrecondition).
// Earlier files there are replaced. The CA's key is not kept: nothing more can be signed once the
// run is over.
// Errors: Internal naming the OpenSSL step, or the file-system error.
#ifndef PP_CLIENT_UP_SECRETS_H_
#define PP_CLIENT_UP_SECRETS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pp::client {

struct UpSecrets {
  std::string dir;
  std::string ca;           // dir/ca.crt
  std::string tokens_file;  // dir/tokens
  std::string token_file;   // dir/token
  std::string view_token_file;  // dir/view-token with `view_token`; empty otherwise
  std::string Cert(const std::string& name) const { return dir + "/" + name + ".crt"; }
  std::string Key(const std::string& name) const { return dir + "/" + name + ".key"; }
  // --tls_cert, --tls_key and --tls_ca for a daemon holding `name`'s certificate.
  std::vector<std::string> DaemonFlags(const std::string& name) const;
};

absl::StatusOr<UpSecrets> MakeUpSecrets(const std::string& dir,
                                        const std::vector<std::string>& names,
                                        const std::vector<std::string>& admins = {},
                                        bool view_token = false);

}  // namespace pp::client

#endif  // PP_CLIENT_UP_SECRETS_H_
