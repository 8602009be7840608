// Rendezvous key-value store of ppcoord (internal), served as WorkerRegistry.KvSet / KvGet. Workers
// publish their Gloo addresses and NCCL unique ids here under "<job>/<attempt>/..." and wait for
// their peers' keys (their client side is worker/comm's comm::KvStore). Who may touch a key is
// not the store's to decide: with TLS, the service checks kv_access.h before each call.
//
// Bounded: a key's bytes are its name plus its value; one job attempt (the key's first two path
// components, "<job>/<attempt>/") and the whole store each hold at most so many keys and bytes,
// and a value at most so many bytes (RendezvousLimits). A Set beyond a limit changes nothing and
// is RESOURCE_EXHAUSTED naming the limit. A key neither set nor read for `idle_ttl` is dropped
// (an attempt that ended without StopAttempt, e.g. keys of a worker's own making); ppcoord also
// drops an attempt's keys when the attempt stops and a job's when it ends.
// A Get waits at most max_wait, whatever its caller asked: each wait holds a server thread, so a
// long rendezvous is a client's loop of short waits (worker/comm's comm::KvStore retries until its
// own deadline), and a client that vanished holds a thread no longer than that.
// Thread-safe: one lock of its own guards the values; Get releases it while it waits.
#ifndef PP_COORDINATOR_RENDEZVOUS_H_
#define PP_COORDINATOR_RENDEZVOUS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pp::coordinator {

// The longest one Get (one KvGet call) waits before it answers DEADLINE_EXCEEDED, "not yet".
inline constexpr absl::Duration kMaxRendezvousWait = absl::Seconds(10);

// Gloo's full mesh stores one key per rank whose value holds an address per peer (about 140
// bytes each), so 1 MiB is a mesh of about 7000 ranks, above the 4096 ranks a spec may ask for;
// an NCCL unique id is 128 bytes. The store's totals keep a flood of keys from exhausting
// ppcoord's memory while many jobs of such size rendezvous at once.
struct RendezvousLimits {
  int64_t max_value_bytes = int64_t{1} << 20;     // 1 MiB
  int64_t max_attempt_keys = int64_t{1} << 16;    // 65536
  int64_t max_attempt_bytes = int64_t{64} << 20;  // 64 MiB
  int64_t max_total_keys = int64_t{1} << 18;      // 262144
  int64_t max_total_bytes = int64_t{512} << 20;   // 512 MiB
  absl::Duration idle_ttl = absl::Hours(1);
  absl::Duration max_wait = kMaxRendezvousWait;
};



class RendezvousStore {
 public:
  // `clock` dates the keys for idle_ttl (tests pass a fake one); waits use real time.
  explicit RendezvousStore(
      RendezvousLimits limits = {}, std::function<absl::Time()> clock = [] { return absl::Now(); });

  // RESOURCE_EXHAUSTED (nothing stored) if the value, the key's attempt or the store would go
  // over its limit.
  absl::Status Set(const std::string& key, std::string value);

  // Values of `keys` in order, once all exist. Waits up to `timeout`, at most limits.max_wait;
  // DeadlineExceeded names the missing keys. `cancelled` (polled while waiting) lets a caller that went away stop the wait.
  absl::StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                               absl::Duration timeout,
                                               const std::function<bool()>& cancelled = nullptr);

  // Drops every key starting with `prefix` (a finished job's rendezvous).
  int EraseWithPrefix(const std::string& prefix);

  // Ends every wait now (server shutdown): waiters answer Unavailable.
  void Close();

  size_t size() const;

 private:
  struct Entry {
    std::string value;
    absl::Time touched;
  };
  struct Usage {
    int64_t keys = 0;
    int64_t bytes = 0;
  };

  bool AllPresent(const std::vector<std::string>& keys) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status CheckRoom(const std::string& key, const std::string& value) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void Account(const std::string& key, int64_t keys, int64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::map<std::string, Entry>::iterator EraseLocked(std::map<std::string, Entry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropIdleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RendezvousLimits limits_;
  const std::function<absl::Time()> clock_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> values_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Usage> attempts_ ABSL_GUARDED_BY(mu_);  // by "<job>/<attempt>/"
  Usage total_ ABSL_GUARDED_BY(mu_);
  absl::Time last_sweep_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_RENDEZVOUS_H_
