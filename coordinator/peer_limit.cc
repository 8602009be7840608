#include "coordinator/peer_limit.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pp::coordinator {

std::string PeerHost(const std::string& peer) {
  // The port follows the last ':'; the scheme ("ipv4:") is also followed by one, so a peer with
  // a single ':' has no port. An IPv6 host ends in ']' before its port.
  const size_t colon = peer.rfind(':');
  if (colon == std::string::npos || peer.find(':') == colon) return peer;
  if (peer.find('[') != std::string::npos && peer[colon - 1] != ']') return peer;
  return peer.substr(0, colon);
}

std::string ClientOf(const std::string& identity, const std::string& peer) {
  // "user " keeps a name from posing as a host ("ipv4:...") and so taking an anonymous share.
  return identity.empty() ? PeerHost(peer) : absl::StrCat("user ", identity);
}

PeerLimit::Slot::~Slot() { limit_->Release(client_); }

absl::StatusOr<std::unique_ptr<PeerLimit::Slot>> PeerLimit::Acquire(const std::string& client) {
  absl::MutexLock lock(&mu_);
  int& held = held_[client];
  if (held >= max_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what_, ": ", client, " holds ", held, ", the limit per client; close one"));
  }
  ++held;
  return std::make_unique<Slot>(this, client);
}

void PeerLimit::Release(const std::string& client) {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(client);
  if (it != held_.end() && --it->second <= 0) held_.erase(it);
}

}  // namespace pp::coordinator
