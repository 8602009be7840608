// Who may read and write a rendezvous key, and who may report on a rank (internal): the pure rules
// behind WorkerRegistry.KvSet, KvGet and the Report* calls when ppcoord serves TLS. A key
// "<job>/<attempt>/..." (TaskPlan.rendezvous_prefix) belongs to that attempt of that job; only a
// worker placed on it, while it is the job's live attempt, may touch it. A caller is the worker
// its client certificate's common name names (common::PeerName), as RegisterWorker demands of a
// worker's name; the certificate's other names (localhost, ...) name no one.
// No locks, no RPC, no clock: the caller brings the job's live attempt (JobManager::LiveAttempt).
#ifndef PP_COORDINATOR_KV_ACCESS_H_
#define PP_COORDINATOR_KV_ACCESS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pp::coordinator {

// The attempt a key is scoped to.
struct KeyScope {
  std::string job_id;
  int attempt = 0;
};

// The scope of "<job>/<attempt>/<rest>" (a non-empty job id, a decimal attempt >= 0 written
// without leading zeros, a rest that may be empty); nullopt for any other key.
std::optional<KeyScope> ScopeOfKey(absl::string_view key);

// A RUNNING job's attempt and the workers placed on it: workers[i] holds rank ranks[i].
struct LiveAttempt {
  int attempt = 0;
  std::vector<std::string> workers;
  std::vector<int> ranks;
};

// OK when `key` is scoped to `live` (the live attempt of the key's job; nullopt when that job is
// unknown or not running) and `caller` is a worker placed on it. Otherwise
// PERMISSION_DENIED naming the key's job and attempt and the caller: the same answer
// whether the job is unknown, ended, on another attempt or run by other workers, so the answer
// tells a stranger nothing about which jobs run. A key with no scope (ScopeOfKey) is
// PERMISSION_DENIED too.
absl::Status CheckKvAccess(const std::string& key, const std::optional<LiveAttempt>& live,
                           const std::string& caller);

// The rule behind WorkerRegistry.ReportStep, ReportTask and ReportCheckpoint under TLS: a report
// about rank `rank` of attempt `attempt` of a job is taken only from the worker placed on that
// rank of that attempt, while it is the job's live attempt (`live`, as for keys). A report about
// an attempt that is not live is let through: JobManager answers it with abort and changes
// nothing. Otherwise PERMISSION_DENIED naming the job, attempt, rank and the caller.
absl::Status CheckReportAccess(const std::string& job_id, int attempt, int rank,
                               const std::optional<LiveAttempt>& live, const std::string& caller);

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_KV_ACCESS_H_
