// Whether a host of a listen address reaches this machine only, for the daemons' rule "plaintext
// only on loopback" (common/tls.h CheckListenAddress). Decided on addresses, never on spelling:
// - a numeric IPv4 or IPv6 address (IPv6 with or without brackets) is loopback when it lies in
//   127.0.0.0/8, is ::1, or is an IPv4-mapped 127.0.0.0/8 address (::ffff:127.0.0.1);
// - a name (localhost) is loopback when it resolves (getaddrinfo: /etc/hosts, then DNS) to at least
//   one address and to loopback addresses only; one that does not resolve within
//   kLoopbackLookupTimeout is not. So "127.evil.example" is not loopback;
// - the empty host (every interface) is not.
// Limit: gRPC resolves the name again when it binds; a name whose answers change in between (DNS
// the operator does not control) is not covered. Give a numeric address to be exact.
// Thread-safe. A lookup that outlives its timeout ends on a detached thread of its own.
#ifndef PP_COMMON_LOOPBACK_H_
#define PP_COMMON_LOOPBACK_H_

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace pp::common {

// DNS without a reachable server may spend the resolver's retries (tens of seconds) on a name.
inline constexpr absl::Duration kLoopbackLookupTimeout = absl::Seconds(5);

bool IsLoopbackHost(absl::string_view host);

}  // namespace pp::common

#endif  // PP_COMMON_LOOPBACK_H_
