#include "client/credentials.h"

#include <cstdlib>
#include <filesystem>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/tls.h"

ABSL_FLAG(std::string, ca, "",
          "server commands: PEM certificate of the CA that signed ppcoord's; gives TLS");
ABSL_FLAG(std::string, cert, "",
          "server commands: PEM client certificate of --ca; an admin with OU=pipeline-admin");
ABSL_FLAG(std::string, key, "", "server commands: PEM private key of --cert");
ABSL_FLAG(std::string, token_file, "",
          "server commands: file holding the bearer token; default $PPCTL_TOKEN_FILE, else "
          "~/.config/pipeline/token (a missing default file: no token)");

namespace pp::client {
namespace {

// A token file over this is not one.
constexpr uint64_t kMaxTokenFileBytes = 64 << 10;

// The token file to read, and whether it must exist (it was named rather than defaulted).
std::pair<std::string, bool> TokenPath() {
  const std::string flag = absl::GetFlag(FLAGS_token_file);
  if (!flag.empty()) return {flag, true};
  if (const char* env = std::getenv("PPCTL_TOKEN_FILE"); env != nullptr && *env != '\0') {
    return {env, true};
  }
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') return {"", false};
  return {absl::StrCat(home, "/.config/pipeline/token"), false};
}

absl::StatusOr<std::string> ReadToken() {
  const auto [path, required] = TokenPath();
  if (path.empty() || (!required && !std::filesystem::exists(path))) return std::string();
  absl::StatusOr<std::string> text = common::ReadFile(path, kMaxTokenFileBytes);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token_file=", path, ": cannot read: ", text.status().message()));
  }
  const std::string token(absl::StripAsciiWhitespace(text->substr(0, text->find('\n'))));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--token_file=", path, ": holds no token"));
  }
  return token;
}

}  // namespace

absl::StatusOr<ClientCredentials> ClientCredentialsFromFlags() {
  ClientCredentials credentials;
  absl::StatusOr<std::string> token = ReadToken();
  if (!token.ok()) return token.status();
  credentials.token = *std::move(token);
  const common::TlsPaths paths{absl::GetFlag(FLAGS_cert), absl::GetFlag(FLAGS_key),
                               absl::GetFlag(FLAGS_ca)};
  if (paths.empty()) {
    credentials.channel = grpc::InsecureChannelCredentials();
    return credentials;
  }
  absl::StatusOr<common::TlsConfig> tls = common::LoadTls(paths, /*need_cert=*/false, "");
  if (!tls.ok()) return tls.status();
  credentials.channel = common::ChannelCredentials(*tls);
  credentials.tls = true;
  return credentials;
}

}  // namespace pp::client
