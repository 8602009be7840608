// HOST:PORT, as the daemons' address flags take it (--grpc, --metrics, --coordinator).
// Contract: ParseHostPort splits at the last colon, so a bracketed IPv6 host keeps its brackets
// ("[::1]:50051" gives host "[::1]"); the port is 0..65535 in decimal digits, where 0 means "pick
// a free port" for an address to listen on; an empty host means every interface. Bad input is
// InvalidArgument reading "--FLAG=VALUE: want HOST:PORT (port 0 picks a free port)" when `flag` is
// given, "address 'VALUE': want HOST:PORT (...)" otherwise. Pure functions: thread-safe.
#ifndef PP_COMMON_HOST_PORT_H_
#define PP_COMMON_HOST_PORT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pp::common {

struct HostPort {
  std::string host;
  int port = 0;

  // "", 0.0.0.0, :: or [::]: a listener on every interface, which no peer can dial as given.
  bool IsWildcard() const;
  // host:port again.
  std::string ToString() const;
};

absl::StatusOr<HostPort> ParseHostPort(absl::string_view address, absl::string_view flag = "");

}  // namespace pp::common

#endif  // PP_COMMON_HOST_PORT_H_
