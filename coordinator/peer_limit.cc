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

PeerLimit::Slot::~Slot() { limit_->Release(host_); }

absl::StatusOr<std::unique_ptr<PeerLimit::Slot>> PeerLimit::Acquire(const std::string& peer) {
  std::string host = PeerHost(peer);
  absl::MutexLock lock(&mu_);
  int& held = held_[host];
  if (held >= max_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what_, ": ", host, " holds ", held, ", the limit per client host; close one"));
  }
  ++held;
  return std::make_unique<Slot>(this, std::move(host));
}

void PeerLimit::Release(const std::string& host) {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(host);
  if (it != held_.end() && --it->second <= 0) held_.erase(it);
}

}  // namespace pp::coordinator
