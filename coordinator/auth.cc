#include "coordinator/auth.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_io.h"
#include "common/sha256.h"
#include "common/tls.h"

namespace pp::coordinator {
namespace {

// The role each pp.v1.Coordinator method needs; a method missing here needs admin.
struct MethodRole {
  absl::string_view method;
  Role role;
};
constexpr MethodRole kMethodRoles[] = {
    {"SubmitJob", Role::kSubmit}, {"CancelJob", Role::kSubmit}, {"ResumeJob", Role::kSubmit},
    {"GetJob", Role::kView},      {"ListJobs", Role::kView},    {"ListJobSteps", Role::kView},
    {"WatchJob", Role::kView},    {"ListWorkers", Role::kView}, {"GetTrace", Role::kView},
    {"PlanJob", Role::kView},     {"GetJobLogs", Role::kView},
};

// A token file over this is no token file.
constexpr uint64_t kMaxTokenFileBytes = 1 << 20;

Role RequiredRole(absl::string_view method) {
  for (const MethodRole& entry : kMethodRoles) {
    if (entry.method == method) return entry.role;
  }
  return Role::kAdmin;
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kView:
      return "view";
    case Role::kSubmit:
      return "submit";
    case Role::kAdmin:
      return "admin";
  }
  return "?";
}

std::optional<Role> ParseRole(absl::string_view text) {
  for (Role role : {Role::kView, Role::kSubmit, Role::kAdmin}) {
    if (text == RoleName(role)) return role;
  }
  return std::nullopt;
}

// The value of the call's `authorization` metadata; empty when there is none.
std::string AuthorizationHeader(const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

}  // namespace

absl::StatusOr<TokenTable> TokenTable::Parse(absl::string_view text, absl::string_view source) {
  TokenTable table;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    const std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(source, " line ", line_number, ": ", why));
    };
    if (words.size() != 3) return bad("want TOKEN ROLE NAME");
    const std::optional<Role> role = ParseRole(words[1]);
    if (!role.has_value()) {
      return bad(absl::StrCat("unknown role \"", words[1], "\" (admin, submit or view)"));
    }
    Entry entry{common::Sha256Hex(words[0]), Caller{std::string(words[2]), *role}};
    if (table.Find(words[0]).has_value()) return bad("the token of an earlier line again");
    table.entries_.push_back(std::move(entry));
  }
  return table;
}

absl::StatusOr<TokenTable> TokenTable::Load(const std::string& path) {
  const std::string source = absl::StrCat("--auth_tokens=", path);
  absl::StatusOr<std::string> text = common::ReadFile(path, kMaxTokenFileBytes);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": cannot read: ", text.status().message()));
  }
  return Parse(*text, source);
}

std::optional<Caller> TokenTable::Find(absl::string_view token) const {
  // Digests have one length whatever the token's, and every entry is compared: the time taken
  // tells nothing about which bytes matched.
  const std::string digest = common::Sha256Hex(token);
  std::optional<Caller> found;
  for (const Entry& entry : entries_) {
    if (CRYPTO_memcmp(entry.digest.data(), digest.data(), digest.size()) == 0) {
      found = entry.caller;
    }
  }
  return found;
}

bool IsAdminCertificate(const common::PeerCert& peer) {
  return !peer.name.empty() &&
         std::find(peer.units.begin(), peer.units.end(), kAdminUnit) != peer.units.end();
}

absl::Status Authorizer::CheckDenied(const std::optional<common::PeerCert>& peer,
                                     absl::string_view method) const {
  if (deny_ == nullptr || !peer.has_value()) return absl::OkStatus();
  return deny_->Check(*peer, method);
}

absl::StatusOr<Caller> Authorizer::Authenticate(const grpc::ServerContext& context,
                                                absl::string_view method) const {
  const std::string where = absl::StrCat("pp.v1.Coordinator/", method);
  const std::optional<common::PeerCert> peer = common::VerifiedPeer(context);
  if (absl::Status denied = CheckDenied(peer, where); !denied.ok()) return denied;
  const std::string header = AuthorizationHeader(context);
  if (!header.empty()) {
    absl::string_view token = header;
    if (!absl::ConsumePrefix(&token, "Bearer ") || token.empty()) {
      return absl::UnauthenticatedError(
          absl::StrCat(where, ": the authorization metadata must read \"Bearer TOKEN\""));
    }
    std::optional<Caller> caller =
        tokens_.has_value() ? tokens_->Find(token) : std::optional<Caller>();
    if (!caller.has_value()) {
      return absl::UnauthenticatedError(
          absl::StrCat(where, ": unknown token (not in --auth_tokens)"));
    }
    return *std::move(caller);
  }
  if (!peer.has_value()) {
    return absl::UnauthenticatedError(
        absl::StrCat(where,
                     ": no credentials: send \"authorization: Bearer TOKEN\" or an admin client "
                     "certificate of the CA"));
  }
  if (!IsAdminCertificate(*peer)) {
    return absl::PermissionDeniedError(
        absl::StrCat(where, ": the client certificate of ", peer->name,
                     " is not an admin certificate (subject OU=", kAdminUnit,
                     "); send \"authorization: Bearer TOKEN\""));
  }
  return Caller{peer->name, Role::kAdmin};
}

absl::StatusOr<Caller> Authorizer::Authorize(const grpc::ServerContext& context,
                                             absl::string_view method) const {
  if (!enabled()) return Caller{};
  absl::StatusOr<Caller> caller = Authenticate(context, method);
  if (!caller.ok()) return caller.status();
  const Role needed = RequiredRole(method);
  if (static_cast<int>(caller->role) < static_cast<int>(needed)) {
    return absl::PermissionDeniedError(
        absl::StrCat("pp.v1.Coordinator/", method, ": user ", caller->name, " has role ",
                     RoleName(caller->role), "; this needs role ", RoleName(needed)));
  }
  return caller;
}

absl::Status Authorizer::AuthorizeWorker(const grpc::ServerContext& context,
                                         absl::string_view method,
                                         const std::string* worker) const {
  if (!tls_) return absl::OkStatus();
  const std::string where = absl::StrCat("pp.v1.WorkerRegistry/", method);
  const std::optional<common::PeerCert> peer = common::VerifiedPeer(context);
  if (!peer.has_value()) {
    return absl::UnauthenticatedError(
        absl::StrCat(where, ": takes only callers with a client certificate of --tls_ca"));
  }
  if (absl::Status denied = CheckDenied(peer, where); !denied.ok()) return denied;
  if (worker != nullptr && (worker->empty() || *worker != peer->name)) {
    return absl::PermissionDeniedError(absl::StrCat(
        where, ": worker name \"", *worker,
        "\" is not in the caller's certificate, whose common name (a worker's one name) is \"",
        peer->name, "\""));
  }
  return absl::OkStatus();
}

absl::Status CheckOwner(const Caller& caller, const std::string& owner, absl::string_view method,
                        absl::string_view job_id) {
  if (caller.role == Role::kAdmin || caller.name == owner) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("pp.v1.Coordinator/", method, ": job ", job_id, " belongs to ", owner,
                   "; only its owner or an admin may change it (you are ", caller.name, ")"));
}

}  // namespace pp::coordinator
