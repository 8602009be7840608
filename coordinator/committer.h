// The committer of ppcoord (internal): every store and checkpoint I/O after startup, on threads of
// its own, so that none of it runs under JobManager's lock (the threading contract is in jobs.h).
//
// What it owns:
//  - the CommitQueue (commit_queue.h): the rows transitions marked dirty and their tickets, the
//    complete checkpoints to commit, the step records to store, and the rows it wrote;
//  - the committer thread, which works in rounds: each queued checkpoint's manifest
//    (common::CommitManifest), the dirty rows and step records (JobStore::Put, AddStep), the prune
//    of the checkpoints older than those committed (common::PruneCheckpoints); and, each
//    kExpiryScan when ended jobs expire (retention.h), before the round's rows, the deletes of the
//    expired jobs' rows (JobStore::Delete);
//  - the verifier thread, which every `verify_period` hashes the checkpoint each requeued job will
//    start from (common::LatestVerifiedCheckpoint), so that hashing never holds up the scheduler.
// The jobs are not its own: it reads them, and applies what follows from its I/O (a job pointed at
// its checkpoint, events, placement, a job dropped), through CommitterHost (JobManager).
//
// Lock scope. It is given the host's mutex `mu` (JobManager::mu_), which guards the queue, and the
// job store with the store's mutex `store_mu` (JobManager::store_mu_):
//  - under mu: putting work in (MarkDirty, QueueCommit, AddStep; the caller holds mu, asserted),
//    taking a round's work out, recording what was written, and every CommitterHost call;
//  - under store_mu alone: the row writes, step records and deletes (lock order: store_mu before
//    mu, and it never takes store_mu while holding mu: a heartbeat never waits on a disk);
//  - under neither: the manifests' commits, the prunes and the verifier's hashing.
// Ordering: one committer thread: the commits of a job happen in the order its ranks completed
// them. A row that names a new checkpoint is stored before the older ones are pruned (a crash in
// between leaves one checkpoint too many, never a row that points at a pruned one).
#ifndef PP_COORDINATOR_COMMITTER_H_
#define PP_COORDINATOR_COMMITTER_H_

#include <cstdint>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/checkpoint.h"
#include "coordinator/commit_queue.h"
#include "coordinator/store.h"
#include "pp/v1/job.pb.h"

namespace pp::coordinator {

// An ended job to delete, and the attempt it ended (a resume starts another).
struct Expiring {
  std::string job_id;
  int attempt = 0;
};

// A requeued job whose start checkpoint the verifier checks.
struct StartToVerify {
  std::string job_id;
  int attempt = 0;
  int max_step = 0;                                   // the newest step it may start from
  absl::StatusOr<pp::common::LatestManifest> latest;  // what the verifier found
};

// What the committer asks of the jobs' owner. Every call comes from the committer or the verifier
// thread with the host's mutex (the committer's `mu`) held, and must do no I/O.
class CommitterHost {
 public:
  virtual ~CommitterHost() = default;
  // The job's row as it is now, to be written; nullptr for a job no longer known.
  virtual const pp::v1::Job* RowToStore(const std::string& job_id) = 0;
  // After the manifest's commit (commit.written): points the job at the checkpoint, setting
  // commit.ticket to the row write that does (0: none), and emits its event; or logs the failure.
  virtual void ApplyManifest(PendingCommit& commit) = 0;
  // After the round's rows were written and recorded: ends what waited on `commits`.
  virtual void ApplyStored(const std::deque<PendingCommit>& commits) = 0;
  // The jobs expired now whose rows and checkpoints are all written.
  virtual std::vector<Expiring> ExpiredJobs() = 0;
  // After their rows were deleted (deleted[i]: expiring[i]'s outcome): drops them from memory.
  virtual void DropExpired(const std::vector<Expiring>& expiring,
                           const std::vector<absl::Status>& deleted) = 0;
  // The requeued jobs whose start checkpoint is to verify (none with a commit in flight).
  virtual std::vector<StartToVerify> StartsToVerify() = 0;
  // Settles their start steps from what the verifier found, and places what can run.
  virtual void ApplyVerified(const std::vector<StartToVerify>& verified) = 0;
};

struct CommitterOptions {
  std::string checkpoint_root;
  absl::Duration retain_jobs;    // ended jobs expire after this; zero: never
  absl::Duration verify_period;  // the verifier's period
};

// Threading: the methods that put work in or read the queue REQUIRE `mu` (each asserts it: the
// analysis cannot tell the host's mutex is this one); AwaitStored, JoinVerifier and Join EXCLUDE
// it. `host` and `store` outlive it; Join and JoinVerifier end its threads.
class Committer {
 public:
  Committer(absl::Mutex* mu, absl::Mutex* store_mu, JobStore* store, CommitterHost* host,
            CommitterOptions options);

  // Starts the committer and verifier threads.
  void Start();

  // ---- put in (transitions): REQUIRE mu ----
  // Marks the job's row to be written, as it is at the next round (writes coalesce); returns the
  // ticket AwaitStored waits on.
  int64_t MarkDirty(const std::string& job_id);
  bool IsDirty(const std::string& job_id) const;
  // Queues a complete checkpoint's commit, after those queued before it.
  void QueueCommit(PendingCommit commit);
  void AddStep(const std::string& job_id, const pp::v1::JobStepRecord& step);
  // A job deleted from the store (retention.h): nothing waits on its rows any more.
  void Forget(const std::string& job_id);

  // Waits until the job's row as of `ticket` (0: nothing to wait for) was written: the store's
  // outcome (logged by the committer); Unavailable when the committer ended first,
  // DeadlineExceeded after kStoreWait. EXCLUDES mu (releases nothing else).
  absl::Status AwaitStored(const std::string& job_id, int64_t ticket);

  // ---- shutdown, in this order ----
  // REQUIRES mu: the verifier ends at its next wake-up, verifying nothing more.
  void StopVerifier();
  void JoinVerifier();  // EXCLUDES mu
  // REQUIRES mu: the committer writes what is queued, then ends (AwaitStored: Unavailable).
  void Close();
  void Join();  // EXCLUDES mu

 private:
  // How long an RPC waits for its row to be written: the store's busy timeout (5 s) several times.
  static constexpr absl::Duration kStoreWait = absl::Seconds(30);

  // The committer thread: rounds until Close and nothing left.
  void CommitterLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // One round: `commits`' manifests, then every dirty row and step record, then the prunes.
  void CommitRound(std::deque<PendingCommit> commits) ABSL_LOCKS_EXCLUDED(mu_);
  // Deletes the expired jobs' rows under store_mu, then has the host drop them under mu.
  void ExpireRound(const std::vector<Expiring>& expiring) ABSL_LOCKS_EXCLUDED(mu_);
  // The verifier thread: VerifyQueued every verify_period until StopVerifier.
  void VerifierLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Hashes the start checkpoint of each job the host names, outside mu, and hands back results.
  void VerifyQueued() ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex* const mu_;
  absl::Mutex* const store_mu_;
  JobStore* const store_ ABSL_PT_GUARDED_BY(store_mu_);
  CommitterHost* const host_;  // called under mu_
  const CommitterOptions options_;
  CommitQueue queue_ ABSL_GUARDED_BY(mu_);
  bool verifier_stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread committer_;
  std::thread verifier_;
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_COMMITTER_H_
