// The daemons' command line: absl flags, with every bad one a usage error (exit code 2).
// absl::ParseCommandLine alone ends the process with exit code 1 on an unknown flag or a bad value
// (a bare "30" for a Duration flag), which would read as a runtime failure; so ParseDaemonFlags
// first checks every flag token against the registry and returns the first problem as
// InvalidArgument ("unknown flag --x", "bad value '30' for --comm_timeout: ..."), and only then
// lets absl::ParseCommandLine set the flags and handle --help/--helpfull (which print and exit).
// Accepted forms, as absl's: --name=value, --name value (not for bools), --bool, --nobool, one
// or two leading dashes, and "--" ending the flags. The daemons take no positional argument: one
// is InvalidArgument too ("unexpected argument \"x\""). Messages end in " (see --help)".
// REQUIRES: called once, from main, before reading flags.
#ifndef PP_COMMON_DAEMON_FLAGS_H_
#define PP_COMMON_DAEMON_FLAGS_H_

#include <string>

#include "absl/flags/commandlineflag.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/tls.h"

namespace pp::common {

absl::Status ParseDaemonFlags(int argc, char** argv);

// Sets one flag token as absl would: `token` without its leading dashes ("name=value", "name" for
// a bool or with its value in `next`, "noname" for a bool). `next` is the token after it, which a
// non-bool flag without "=value" takes as its value (then *used_next is set); null when there is
// none. `find` looks a name up (absl::FindCommandLineFlag; ppctl narrows it to one command's
// flags); null is an unknown flag. Bad input is InvalidArgument "unknown flag --x", "flag --x
// needs a value" or "bad value 'v' for --x: why". ppctl parses its command lines with this too.
absl::Status SetFlagToken(absl::string_view token, const char* next, bool* used_next,
                          absl::FunctionRef<absl::CommandLineFlag*(absl::string_view)> find);

// The security flags both daemons take (defined here, so they read the same in both):
// --tls_cert, --tls_key, --tls_ca (PEM files; all three or none), --insecure (serve plaintext
// on a non-loopback address; ppcoord's --auth_tokens without TLS) and --deny_certs (revoked
// certificates, common/cert_deny_list.h). See common/tls.h. REQUIRES: after ParseDaemonFlags.
struct SecurityFlags {
  TlsPaths tls;
  bool insecure = false;
  std::string deny_certs;  // empty: none
};
SecurityFlags SecurityFromFlags();

}  // namespace pp::common

#endif  // PP_COMMON_DAEMON_FLAGS_H_
