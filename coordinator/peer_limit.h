// Caps how many calls of one kind (WatchJob streams) each client holds open at once, so one client
// cannot take every server thread. A client is who the call authenticated as (a token's user or a
// certificate's name), so that users behind one address (a port-forward, a NAT) each have their
// own allowance; an anonymous caller (no token file, no TLS) is its host. Thread-safe: one lock of
// its own.
#ifndef PP_COORDINATOR_PEER_LIMIT_H_
#define PP_COORDINATOR_PEER_LIMIT_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace pp::coordinator {

// The host of a gRPC peer string: "ipv4:127.0.0.1:5000" -> "ipv4:127.0.0.1",
// "ipv6:[::1]:5000" -> "ipv6:[::1]"; a peer without a port is its own host.
std::string PeerHost(const std::string& peer);

// Whom a call counts against: "user NAME" for an authenticated `identity`, else PeerHost(peer).
std::string ClientOf(const std::string& identity, const std::string& peer);

class PeerLimit {
 public:
  // Held while the call runs; destroying it frees the peer's slot.
  class Slot {
   public:
    Slot(PeerLimit* limit, std::string client) : limit_(limit), client_(std::move(client)) {}
    ~Slot();
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

   private:
    PeerLimit* limit_;
    std::string client_;
  };

  // `what` names the calls in the refusal, e.g. "WatchJob streams".
  PeerLimit(int max_per_client, std::string what) : max_(max_per_client), what_(std::move(what)) {}

  // A slot for a call of `client` (ClientOf), or RESOURCE_EXHAUSTED naming the client and the
  // limit when it holds max_per_client already. The PeerLimit must outlive the slot.
  absl::StatusOr<std::unique_ptr<Slot>> Acquire(const std::string& client);

 private:
  void Release(const std::string& client);

  const int max_;
  const std::string what_;
  mutable absl::Mutex mu_;
  std::map<std::string, int> held_ ABSL_GUARDED_BY(mu_);  // client -> open calls (> 0)
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_PEER_LIMIT_H_
