// Rendezvous key-value store of ppcoord (internal), served as WorkerRegistry.KvSet / KvGet. Workers
// publish their Gloo addresses and NCCL unique ids here under "<job>/<attempt>/..." and wait for
// their peers' keys (their client side is worker/comm's comm::KvStore).
// Thread-safe: one lock of its own guards the values; Get releases it while it waits.
#ifndef PP_COORDINATOR_RENDEZVOUS_H_
#define PP_COORDINATOR_RENDEZVOUS_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pp::coordinator {

class RendezvousStore {
 public:
  void Set(const std::string& key, std::string value);

  // Values of `keys` in order, once all exist. Waits up to `timeout`; DeadlineExceeded names the
  // missing keys. `cancelled` (polled while waiting) lets a caller that went away stop the wait.
  absl::StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                               absl::Duration timeout,
                                               const std::function<bool()>& cancelled = nullptr);

  // Drops every key starting with `prefix` (a finished job's rendezvous).
  int EraseWithPrefix(const std::string& prefix);

  // Ends every wait now (server shutdown): waiters answer Unavailable.
  void Close();

  size_t size() const;

 private:
  bool AllPresent(const std::vector<std::string>& keys) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_RENDEZVOUS_H_
