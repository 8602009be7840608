#include "common/daemon_flags.h"

#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate of this daemon, signed by --tls_ca; with --tls_key and --tls_ca every "
          "gRPC connection is mutual TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert (unencrypted)");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM certificate of the CA that signs every daemon's (and admin client's) certificate");
ABSL_FLAG(bool, insecure, false,
          "allow plaintext gRPC without authentication on a non-loopback --grpc address (and "
          "ppcoord's --auth_tokens without TLS)");
ABSL_FLAG(std::string, deny_certs, "",
          "file of SHA-256 fingerprints of revoked certificates, one a line ('#' comments): "
          "calls presenting one are refused; read again on SIGHUP");

namespace pp::common {
namespace {

// Checks one flag token (without its dashes) by setting it (SetFlagToken), which is harmless:
// absl::ParseCommandLine sets the same value again.
absl::Status CheckFlag(absl::string_view token, const char* next, bool* used_next) {
  // absl's usage flags are no registered flags: absl::ParseCommandLine handles them.
  const absl::string_view name = token.substr(0, token.find('='));
  for (const char* usage : {"help", "helpfull", "helpshort", "helppackage", "helpon", "helpmatch",
                            "version", "only_check_args"}) {
    if (name == usage) return absl::OkStatus();
  }
  return SetFlagToken(token, next, used_next,
                      [](absl::string_view n) { return absl::FindCommandLineFlag(n); });
}

}  // namespace

absl::Status SetFlagToken(absl::string_view token, const char* next, bool* used_next,
                          absl::FunctionRef<absl::CommandLineFlag*(absl::string_view)> find) {
  std::string name(token), value;
  const size_t eq = name.find('=');
  const bool has_value = eq != std::string::npos;
  if (has_value) {
    value = name.substr(eq + 1);
    name.resize(eq);
  }
  absl::CommandLineFlag* flag = find(name);
  if (flag == nullptr && !has_value && absl::StartsWith(name, "no")) {
    flag = find(name.substr(2));
    if (flag == nullptr || !flag->IsOfType<bool>()) {
      flag = nullptr;
    } else {
      name = name.substr(2);
      value = "false";
    }
  } else if (flag != nullptr && !has_value && flag->IsOfType<bool>()) {
    value = "true";
  } else if (flag != nullptr && !has_value) {
    if (next == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
    }
    value = next;
    *used_next = true;
  }
  if (flag == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
  std::string error;
  if (!flag->ParseFrom(value, &error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad value '", value, "' for --", name, ": ", error));
  }
  return absl::OkStatus();
}

absl::Status ParseDaemonFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view token = argv[i];
    if (token == "--") break;
    if (!absl::ConsumePrefix(&token, "-") || token.empty()) continue;  // positional
    absl::ConsumePrefix(&token, "-");
    bool used_next = false;
    if (absl::Status s = CheckFlag(token, i + 1 < argc ? argv[i + 1] : nullptr, &used_next);
        !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(s.message(), " (see --help)"));
    }
    if (used_next) ++i;
  }
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument \"", rest[1], "\" (see --help)"));
  }
  return absl::OkStatus();
}

SecurityFlags SecurityFromFlags() {
  SecurityFlags flags;
  flags.tls = {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
               absl::GetFlag(FLAGS_tls_ca)};
  flags.insecure = absl::GetFlag(FLAGS_insecure);
  flags.deny_certs = absl::GetFlag(FLAGS_deny_certs);
  return flags;
}

}  // namespace pp::common
