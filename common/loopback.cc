#include "common/loopback.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"

namespace pp::common {
namespace {

bool IsLoopbackIp(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    const in_addr& v4 = reinterpret_cast<const sockaddr_in*>(address)->sin_addr;
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  if (address->sa_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  }
  return false;
}

// Whether every address `host` resolves to is loopback; nullopt when it resolves to none.
// `flags` AI_NUMERICHOST: only parse, never look up.
std::optional<bool> EveryAddressIsLoopback(const std::string& host, int flags) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) {
    return std::nullopt;
  }
  bool loopback = true;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    loopback = loopback && IsLoopbackIp(a->ai_addr);
  }
  freeaddrinfo(found);
  return loopback;
}

// getaddrinfo has no deadline of its own, so the lookup runs on a thread that may outlive it.
bool NameIsLoopback(const std::string& name) {
  struct Lookup {
    absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
    bool loopback ABSL_GUARDED_BY(mu) = false;
  };
  auto lookup = std::make_shared<Lookup>();
  std::thread([lookup, name] {
    const bool loopback = EveryAddressIsLoopback(name, 0).value_or(false);
    absl::MutexLock lock(&lookup->mu);
    lookup->done = true;
    lookup->loopback = loopback;
  }).detach();
  absl::MutexLock lock(&lookup->mu);
  lookup->mu.AwaitWithTimeout(absl::Condition(&lookup->done), kLoopbackLookupTimeout);
  return lookup->done && lookup->loopback;
}

}  // namespace

bool IsLoopbackHost(absl::string_view host) {
  absl::string_view bare = host;
  if (absl::ConsumePrefix(&bare, "[") && !absl::ConsumeSuffix(&bare, "]")) return false;
  if (bare.empty()) return false;
  const std::string name(bare);
  if (std::optional<bool> numeric = EveryAddressIsLoopback(name, AI_NUMERICHOST)) return *numeric;
  return NameIsLoopback(name);
}

}  // namespace pp::common
