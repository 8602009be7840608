// Who may call ppcoord: pp.v1.Coordinator by bearer tokens from --auth_tokens or admin client
// certificates, against one table of method -> required role; pp.v1.WorkerRegistry by client
// certificates of the CA; neither by a certificate on the --deny_certs list.
//
// Token file: one user per line, "TOKEN ROLE NAME" separated by blanks; ROLE is admin (every
// method), submit (submit, and resume and cancel of its own jobs; read everything) or view (read
// only: get, list, watch, workers, trace, plan). Blank lines and lines starting with '#' are
// skipped. Tokens are unique. Errors name the file and line, never the token.
//
// Certificates: a certificate is named by its subject CN alone (common/tls.h). It is an admin
// certificate when its subject also has OU=pipeline-admin (kAdminUnit). Workers' and ppcoord's
// certificates have no such OU: a worker pod that is taken over holds no admin key.
//
// Authorizer contract:
// - Disabled (no token file and no TLS): every caller is an admin with an empty name, as before
//   security existed.
// - A call presenting a certificate on the deny-list: UNAUTHENTICATED, token or not.
// - Otherwise a caller is who the `authorization: Bearer TOKEN` metadata names, or, failing that,
//   an admin named by the CN of its admin certificate. Another certificate without a token:
//   PERMISSION_DENIED; no credentials: UNAUTHENTICATED. A role below the method's:
//   PERMISSION_DENIED. Each message is one line naming the method.
// - AuthorizeWorker (WorkerRegistry, only with TLS): a verified client certificate of the CA, not
//   denied (UNAUTHENTICATED otherwise), whose CN is `worker` when the call names one
//   (PERMISSION_DENIED otherwise); each message names the method.
// - Tokens are compared in constant time (their SHA-256 digests, CRYPTO_memcmp, every entry) and
//   appear in no message or log.
// Thread-safe: immutable after construction (the deny-list reloads itself safely).
#ifndef PP_COORDINATOR_AUTH_H_
#define PP_COORDINATOR_AUTH_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/cert_deny_list.h"
#include "grpcpp/server_context.h"

namespace pp::coordinator {

enum class Role { kView = 1, kSubmit = 2, kAdmin = 3 };

struct Caller {
  std::string name;  // the token's NAME or the certificate's CN; empty when auth is off
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

// The subject OU that marks an admin certificate.
inline constexpr absl::string_view kAdminUnit = "pipeline-admin";
// Whether `peer` is an admin certificate: a CN, and kAdminUnit among its subject OUs.
bool IsAdminCertificate(const common::PeerCert& peer);

class Authorizer {
 public:
  Authorizer() = default;  // disabled
  // `deny` may be null: nothing denied.
  Authorizer(std::optional<TokenTable> tokens, bool tls,
             std::shared_ptr<const common::CertDenyList> deny)
      : tokens_(std::move(tokens)), tls_(tls), deny_(std::move(deny)) {}

  bool enabled() const { return tokens_.has_value() || tls_; }
  bool tls() const { return tls_; }
  // `method` is the bare name ("SubmitJob").
  absl::StatusOr<Caller> Authorize(const grpc::ServerContext& context,
                                   absl::string_view method) const;
  // `worker`: the worker name the call is about; null when it names none.
  absl::Status AuthorizeWorker(const grpc::ServerContext& context, absl::string_view method,
                               const std::string* worker) const;

 private:
  absl::StatusOr<Caller> Authenticate(const grpc::ServerContext& context,
                                      absl::string_view method) const;
  absl::Status CheckDenied(const std::optional<common::PeerCert>& peer,
                           absl::string_view method) const;

  std::optional<TokenTable> tokens_;
  bool tls_ = false;
  std::shared_ptr<const common::CertDenyList> deny_;
};

// Cancel and resume change a job: only its owner or an admin may. PERMISSION_DENIED otherwise.
absl::Status CheckOwner(const Caller& caller, const std::string& owner, absl::string_view method,
                        absl::string_view job_id);

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_AUTH_H_
