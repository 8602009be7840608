// Worker table of ppcoord (internal): who is registered, when each last heartbeat came, and whether
// a worker is IDLE, BUSY (holds a rank of a job) or DOWN (silent longer than the timeout).
// Bounded: at most max_workers names (kMaxWorkers); a DOWN worker is forgotten once silent for
// kDownWorkerTtl (ForgetDown), so workers that come and go under new names do not fill it.
// Not thread-safe: the job manager calls it under its lock. Time is passed in, so tests control it.
#ifndef PP_COORDINATOR_REGISTRY_H_
#define PP_COORDINATOR_REGISTRY_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "pp/v1/coordinator.pb.h"

namespace pp::coordinator {

// Twice the ranks of the largest job a spec may ask for (4096).
inline constexpr int kMaxWorkers = 8192;
// A DOWN worker silent this long is forgotten: it registers anew if it ever comes back.
inline constexpr absl::Duration kDownWorkerTtl = absl::Hours(1);

class WorkerTable {
 public:
  explicit WorkerTable(int max_workers = kMaxWorkers) : max_workers_(max_workers) {}

  // Adds or replaces a worker (a restarted worker registers again under its name). A worker that
  // says it still runs a job starts BUSY with it, else IDLE. Refuses empty names or addresses,
  // and a new name when max_workers are registered (RESOURCE_EXHAUSTED, naming the limit).
  absl::Status Register(const pp::v1::WorkerInfo& info, absl::Time now);

  // Records a heartbeat. False when the worker is unknown or DOWN: it has to register again.
  bool Heartbeat(const std::string& name, absl::Time now);

  // Marks workers silent for longer than `timeout` DOWN; returns them as they were before
  // (their job_id says which job lost a rank).
  std::vector<pp::v1::WorkerInfo> MarkSilentDown(absl::Time now, absl::Duration timeout);
  // Removes the DOWN workers silent for longer than `ttl`, except those `keep` names; returns
  // their names.
  std::vector<std::string> ForgetDown(absl::Time now, absl::Duration ttl,
                                      const std::function<bool(const std::string&)>& keep);

  // IDLE workers, sorted by name (placement is deterministic).
  std::vector<pp::v1::WorkerInfo> Idle() const;

  void SetBusy(const std::string& name, const std::string& job_id);
  void SetIdle(const std::string& name);
  // A worker that is leaving (drained): never placed again unless it registers anew.
  void SetDown(const std::string& name);

  const pp::v1::WorkerInfo* Find(const std::string& name) const;
  std::vector<pp::v1::WorkerInfo> All() const;  // sorted by name
  int CountInState(pp::v1::WorkerState state) const;

 private:
  int max_workers_;
  std::map<std::string, pp::v1::WorkerInfo> workers_;
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_REGISTRY_H_
