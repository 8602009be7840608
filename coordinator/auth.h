// Who may call which pp.v1.Coordinator method: bearer tokens from --auth_tokens and client
// certificates of the CA, against one table of method -> required role.
//
// Token file: one user per line, "TOKEN ROLE NAME" separated by blanks; ROLE is admin (every
// method), submit (submit, and resume and cancel of its own jobs; read everything) or view (read
// only: get, list, watch, workers, trace, plan). Blank lines and lines starting with '#' are
// skipped. Tokens are unique. Errors name the file and line, never the token.
//
// Authorizer contract:
// - Disabled (no token file and no TLS): every caller is an admin with an empty name, as before
//   security existed.
// - Otherwise a caller is who the `authorization: Bearer TOKEN` metadata names, or, failing that,
//   an admin named after its verified client certificate. Neither: UNAUTHENTICATED. A role below
//   the method's: PERMISSION_DENIED. Each message is one line naming the method.
// - Tokens are compared in constant time (their SHA-256 digests, CRYPTO_memcmp, every entry) and
//   appear in no message or log.
// Thread-safe: immutable after construction.
#ifndef PP_COORDINATOR_AUTH_H_
#define PP_COORDINATOR_AUTH_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/server_context.h"

namespace pp::coordinator {

enum class Role { kView = 1, kSubmit = 2, kAdmin = 3 };

struct Caller {
  std::string name;  // the token's NAME or the certificate's name; empty when auth is off
  Role role = Role::kAdmin;
};

class TokenTable {
 public:
  // `source` names the text in errors ("--auth_tokens=/etc/pp/tokens").
  static absl::StatusOr<TokenTable> Parse(absl::string_view text, absl::string_view source);
  static absl::StatusOr<TokenTable> Load(const std::string& path);

  std::optional<Caller> Find(absl::string_view token) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string digest;  // SHA-256 of the token, hex
    Caller caller;
  };
  std::vector<Entry> entries_;
};

class Authorizer {
 public:
  Authorizer() = default;  // disabled
  Authorizer(std::optional<TokenTable> tokens, bool tls) : tokens_(std::move(tokens)), tls_(tls) {}

  bool enabled() const { return tokens_.has_value() || tls_; }
  // `method` is the bare name ("SubmitJob").
  absl::StatusOr<Caller> Authorize(const grpc::ServerContext& context,
                                   absl::string_view method) const;

 private:
  absl::StatusOr<Caller> Authenticate(const grpc::ServerContext& context,
                                      absl::string_view method) const;

  std::optional<TokenTable> tokens_;
  bool tls_ = false;
};

// Cancel and resume change a job: only its owner or an admin may. PERMISSION_DENIED otherwise.
absl::Status CheckOwner(const Caller& caller, const std::string& owner, absl::string_view method,
                        absl::string_view job_id);

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_AUTH_H_
