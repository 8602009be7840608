// The coordinator's state (internal): jobs, workers, rendezvous keys and event streams, behind one
// lock, plus a scheduler thread that detects silent workers, places queued jobs and pushes tasks.
// The gRPC services (service.cc) are thin adapters over these methods.
//
// JobManager owns the lock and wires its parts together: the pure bookkeeping (job_logic.h,
// resume_logic.h, placement.h, common/manifest.h), the worker table (registry.h), the job store
// (store.h), the calls to workers (worker_rpc.h) and the event stream (event_log.h); the last two
// share the lock. Its implementation is in three files: jobs.cc (lifecycle, scheduling, the client
// side), job_transitions.cc (how an attempt ends, fails or is queued again) and worker_reports.cc
// (the worker side: registration, heartbeats, step, task and checkpoint reports).
//
// Threading: every public method is thread-safe and takes mu_ itself (none may be called with it
// held). mu_ guards every member marked ABSL_GUARDED_BY(mu_) and the state of rpc_ and events_.
// Outside mu_ run only the worker RPCs' start (WorkerRpc::Issue, on the scheduler thread), the
// hashing of checkpoints (VerifyQueued, on the verifier thread, and Resume) and the wait of a
// watcher (EventLog::Follow).
#ifndef PP_COORDINATOR_JOBS_H_
#define PP_COORDINATOR_JOBS_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/checkpoint.h"
#include "coordinator/event_log.h"
#include "coordinator/job_logic.h"
#include "coordinator/metrics.h"
#include "coordinator/planning.h"
#include "coordinator/registry.h"
#include "coordinator/rendezvous.h"
#include "coordinator/store.h"
#include "coordinator/worker_rpc.h"
#include "grpcpp/support/status.h"
#include "pp/v1/checkpoint.pb.h"
#include "pp/v1/coordinator.pb.h"

namespace pp::coordinator {

struct ManagerOptions {
  std::string data_dir;                                   // ppcoord.db and checkpoints/
  absl::Duration worker_timeout = absl::Seconds(5);       // silent longer: DOWN
  absl::Duration heartbeat_interval = absl::Seconds(1);   // told to workers
  absl::Duration worker_rpc_deadline = absl::Seconds(5);  // RunTask / AbortTask
  absl::Duration tick = absl::Milliseconds(100);          // scheduler period
  // A rank that lost a peer (its report's error_code is UNAVAILABLE or DEADLINE_EXCEEDED) does
  // not fail the attempt at once: the coordinator asks the attempt's busy workers for their
  // status (each within probe_deadline) and names the one that does not answer, or a rank's own
  // error reported meanwhile; failing that, the lost-peer report stands after failure_settle.
  absl::Duration probe_deadline = absl::Milliseconds(500);
  absl::Duration failure_settle = absl::Seconds(1);
  // Automatic restart n of a job is placed no sooner than restart_backoff * 2^(n-1) after the
  // failure, at most restart_backoff_cap after it (RestartBackoff, job_logic.h): a job that fails
  // at once on every attempt does not spin through its max_restarts.
  absl::Duration restart_backoff = absl::Seconds(1);
  absl::Duration restart_backoff_cap = absl::Seconds(60);
  // RunTask, AbortTask and probes dial workers with these; null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> worker_credentials;
};

class JobManager {
 public:
  // Opens the store under options.data_dir and reloads its jobs: queued ones wait again, jobs
  // that were running when ppcoord stopped are queued again (a new attempt) from their newest
  // committed checkpoint, to be placed once enough workers (re-)register. A stored job whose spec
  // is now refused (common/spec_bounds.h) is FAILED, its reason and one log line saying why.
  static absl::StatusOr<std::unique_ptr<JobManager>> Create(const ManagerOptions& options,
                                                            CoordinatorMetrics* metrics);
  ~JobManager();

  // Ends the scheduler, every watch and every rendezvous wait. Idempotent.
  void Stop();

  // Client side.
  absl::StatusOr<std::string> Submit(const pp::v1::JobSpec& spec, const std::string& owner = "");
  absl::StatusOr<pp::v1::Job> Get(const std::string& job_id);
  // One page in submission order (coordinator/list_page.h); INVALID_ARGUMENT for a bad page.
  absl::StatusOr<pp::v1::ListJobsResponse> List(const pp::v1::ListJobsRequest& request);
  absl::StatusOr<pp::v1::Job> Cancel(const std::string& job_id);
  // Queues an ended job again from a verified committed checkpoint (request.step, or the newest),
  // optionally on a new layout (request.parallel) or to a new total of steps (request.steps).
  absl::StatusOr<pp::v1::Job> Resume(const pp::v1::ResumeJobRequest& request);
  std::vector<pp::v1::WorkerInfo> Workers();
  absl::StatusOr<pp::v1::StepTrace> Trace(const std::string& job_id, int step);
  // Calls `send` with the job's current state, then with each new event, until the job ends,
  // `send` returns false, `cancelled` returns true, or Stop.
  absl::Status Watch(const std::string& job_id,
                     const std::function<bool(const pp::v1::JobEvent&)>& send,
                     const std::function<bool()>& cancelled);

  // Worker side.
  absl::StatusOr<pp::v1::RegisterWorkerResponse> Register(const pp::v1::WorkerInfo& worker);
  pp::v1::HeartbeatResponse Heartbeat(const pp::v1::HeartbeatRequest& request);
  pp::v1::ReportResponse ReportStep(const pp::v1::StepReport& report);
  pp::v1::ReportResponse ReportTask(const pp::v1::TaskReport& report);
  pp::v1::ReportResponse ReportCheckpoint(const pp::v1::CheckpointReport& report);
  RendezvousStore& rendezvous() { return rendezvous_; }

  std::string checkpoint_root() const;

 private:
  // job.attempt() is the live attempt: the one running, or the one waiting to be placed.
  struct JobRecord {
    pp::v1::Job job;
    pp::v1::Schedule schedule;
    std::vector<int> stage_units;
    std::unique_ptr<StepAggregator> steps;
    std::unique_ptr<CheckpointCollector> checkpoints;
    std::set<int> ranks_done;
    bool drained = false;  // a rank stopped at stop_step (a worker drains)
    int stop_step = 0;     // >0: every rank checkpoints and stops after it
    int newest_reported_step = 0;
    std::set<std::string> leaving_workers;  // asked to drain: not placed again
    // A lost-peer failure of `attempt` waiting for its cause (ManagerOptions::failure_settle).
    struct Suspicion {
      int attempt = 0;
      std::string reason;  // the lost-peer report, the reason when no cause turns up
      std::string worker;  // that report's worker
      absl::Time deadline;
      // Probes not answered yet. The report stands only once every probe has answered (each is
      // bounded by probe_deadline), so a slow answer under load cannot let the settle time run
      // out before the worker that does not answer is found.
      int probes_pending = 0;
    };
    std::optional<Suspicion> suspicion;
    // QUEUED with start_step = the newest committed checkpoint, not verified yet (VerifyQueued).
    bool verify_pending = false;
    // QUEUED after an automatic restart: not placed before this time (the restart's backoff).
    absl::Time not_before = absl::InfinitePast();
    // job.reason says why it waits (NoteWait) rather than why its attempt began.
    bool waiting = false;
  };
  // The task a BUSY worker was given (or says it runs).
  struct Held {
    std::string job_id;
    int attempt = 0;
  };
  // The checkpoint a resume starts from, found and verified outside the lock.
  struct ResumeCheckpoint {
    absl::StatusOr<pp::v1::CheckpointManifest> manifest;
    std::vector<std::string> skipped;  // why each newer committed step was refused
  };

  JobManager(const ManagerOptions& options, std::unique_ptr<JobStore> store,
             CoordinatorMetrics* metrics);
  absl::Status Reload();
  void SchedulerLoop();
  void Tick() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Places every QUEUED job that can start now, oldest first; a job that does not fit the idle
  // workers waits, with the reason in job.reason (WaitReason), and does not hold back later jobs
  // that fit (backfill).
  void PlaceQueued() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records why a QUEUED job waits: job.reason, persisted and emitted when it changed.
  void NoteWait(JobRecord& rec, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Verifies the checkpoint each requeued job will start from, outside the lock (hashing every
  // shard), then settles its start step (an older checkpoint when that one is damaged, step 0
  // when none verifies) and places what can run.
  void VerifyQueued() ABSL_LOCKS_EXCLUDED(mu_);
  // VerifyQueued every tick, on a thread of its own, until Stop.
  void VerifierLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // What PlaceQueued does for one job that fits on `placement`: RUNNING, its workers BUSY, a
  // RunTask to each.
  void Start(JobRecord& rec, std::vector<pp::v1::RankPlacement> placement)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Settles the start step of a requeued job once VerifyQueued checked its checkpoint.
  void SettleStartStep(JobRecord& rec, const absl::StatusOr<pp::common::LatestManifest>& latest)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Resume, under the lock: the checks on the job and the request, and the plan of the next
  // attempt; `attempt` is the ended attempt (Resume applies only if it is still the job's).
  absl::StatusOr<PlannedJob> PlanResume(const pp::v1::ResumeJobRequest& request, int* attempt)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Resume, under the lock again: queues the job from `checkpoint` unless it changed meanwhile.
  absl::StatusOr<pp::v1::Job> ApplyResume(const std::string& job_id, int attempt,
                                          PlannedJob planned, const ResumeCheckpoint& checkpoint)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker RPC came back (WorkerRpc's completion): probes go to ProbeAnswered; a failed RunTask
  // of the live attempt frees its worker and fails the attempt.
  void RpcDone(const Outbound& rpc, const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues AbortTask(job_id, attempt, reason) to `worker` at `address`.
  void QueueAbort(const std::string& worker, const std::string& address, const std::string& job_id,
                  int attempt, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  JobRecord* FindLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `held` is the running attempt of a RUNNING job.
  bool IsLive(const Held& held) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees `worker` when it held `held` (it said it ended that task).
  void Release(const std::string& worker, const Held& held) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks the workers running the job's live attempt (except `skip_worker`) to stop it, and drops
  // that attempt's rendezvous keys. The workers stay BUSY until they say the task ended.
  void StopAttempt(JobRecord& rec, const std::string& reason, const std::string& skip_worker)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves a job to a terminal state: persists it, emits the event, stops its live attempt.
  // Returns what Persist returned (OK when the transition is not allowed: that is only logged).
  absl::Status Finish(JobRecord& rec, pp::v1::JobState state, const std::string& reason,
                      const std::string& skip_worker = "") ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A failure of the live attempt: Requeue while max_restarts allows, else Finish FAILED.
  void Fail(JobRecord& rec, const std::string& reason, const std::string& skip_worker = "")
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A rank of the live attempt lost a peer: probes the attempt's busy workers once and fails when
  // the cause is known: a worker that does not answer, a rank's own error (ReportTask fails at
  // once), or, when every rank only lost a peer or ManagerOptions::failure_settle passed, the
  // first lost-peer report.
  void Suspect(JobRecord& rec, const std::string& reason, const std::string& worker)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The answer of a probe sent by Suspect.
  void ProbeAnswered(const Outbound& probe, const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops the live attempt and queues the next one from the newest verified checkpoint of this
  // job's history (at most job.last_checkpoint_step); `automatic` restarts count against
  // max_restarts. Emits EVENT_RESTARTED.
  void Requeue(JobRecord& rec, const std::string& reason, bool automatic,
               const std::string& skip_worker = "") ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends the job's current state as an event of `kind` with `message`; returns it, for the
  // caller to complete.
  pp::v1::JobEvent& Emit(JobRecord& rec, pp::v1::JobEventKind kind, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the job's row; logs and returns the store's error. A call that answers a client fails
  // on an error; a transition nobody waits on only logs it (its job's next write retries).
  absl::Status Persist(JobRecord& rec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CommitCheckpoint(JobRecord& rec, const std::vector<pp::v1::CheckpointReport>& shards)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGauges() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ManagerOptions options_;
  CoordinatorMetrics* const metrics_;
  RendezvousStore rendezvous_;  // thread-safe on its own

  absl::Mutex mu_;
  WorkerRpc rpc_;    // guarded by mu_ (see worker_rpc.h)
  EventLog events_;  // guarded by mu_ (see event_log.h)
  std::unique_ptr<JobStore> store_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, JobRecord> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);  // submission order
  WorkerTable workers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Held> held_ ABSL_GUARDED_BY(mu_);  // BUSY workers' tasks
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread scheduler_;
  std::thread verifier_;  // VerifierLoop: checkpoint hashing never holds up the scheduler
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_JOBS_H_
