// Caps how many calls of one kind (WatchJob streams) each client host holds open at once, so one
// client cannot take every server thread. Thread-safe: one lock of its own.
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

class PeerLimit {
 public:
  // Held while the call runs; destroying it frees the peer's slot.
  class Slot {
   public:
    Slot(PeerLimit* limit, std::string host) : limit_(limit), host_(std::move(host)) {}
    ~Slot();
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

   private:
    PeerLimit* limit_;
    std::string host_;
  };

  // `what` names the calls in the refusal, e.g. "WatchJob streams".
  PeerLimit(int max_per_host, std::string what) : max_(max_per_host), what_(std::move(what)) {}

  // A slot for a call of `peer`, or RESOURCE_EXHAUSTED naming the host and the limit when its
  // host holds max_per_host already. The PeerLimit must outlive the slot.
  absl::StatusOr<std::unique_ptr<Slot>> Acquire(const std::string& peer);

 private:
  void Release(const std::string& host);

  const int max_;
  const std::string what_;
  mutable absl::Mutex mu_;
  std::map<std::string, int> held_ ABSL_GUARDED_BY(mu_);  // host -> open calls (> 0)
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_PEER_LIMIT_H_
