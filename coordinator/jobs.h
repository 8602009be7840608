// The coordinator's state (internal): jobs, workers, rendezvous keys and event streams, behind one
// lock, plus a scheduler thread that detects silent workers, places queued jobs and pushes tasks,
// and the threads that do the store and checkpoint I/O outside that lock.
// The gRPC services (service.cc) are thin adapters over these methods.
//
// JobManager owns the lock and wires its parts together, each a type with its own contract:
//  - JobRecord (job_record.h): one job, its row and its live attempt. Its lifecycle changes only
//    by JobEdit values (place, end, requeue, resume, wait, backoff, settle start, checkpoint),
//    applied by LogAndApply here, which checks each against the state machine (an illegal one is
//    logged as an internal error and not applied) and marks the row for the committer.
//  - JobQueue (job_queue.h): submission order, and which QUEUED jobs PlaceQueued tries, in what
//    order (held: an unverified restart checkpoint, a backoff, a calibration).
//  - Policy (policy.h) and the pure decisions of scheduling.h: priorities, quotas, reservations
//    and preemption at a checkpoint, applied by shared_cluster.cc.
//  - Committer (committer.h): the store and checkpoint I/O outside the lock, on its committer and
//    verifier threads, and its CommitQueue (commit_queue.h: dirty rows and their tickets,
//    checkpoints to commit, step records, and the rows it wrote, which Committer::AwaitStored
//    waits on). It reaches the jobs only through CommitterHost, which JobManager implements, and
//    calls it under mu_.
//  - CalibrationRun and CalibrationCache (calibration_run.h): parallel.schedule "auto"'s
//    calibration in flight (in the job's record) and the calibrations measured so far.
//  - AutoPlanRun (auto_plan_run.h): the rest of an "auto" job's run, in its record: the plan
//    chosen from a calibration, the trial fit, the prediction checks and the re-plans called.
//    It decides; JobManager (calibration.cc) sends the Calibrate RPCs, holds the workers,
//    applies the edits and starts or stops the job.
//  - the pure bookkeeping (job_logic.h, resume_logic.h, placement.h, common/manifest.h), the
//    worker table (registry.h), the job store (store.h), the calls to workers (worker_rpc.h) and
//    the event stream (event_log.h).
// None of them has a lock of its own: all live under mu_ but the job store, under store_mu_ (the
// rendezvous store, thread-safe on its own, stands apart). The implementation is in nine files:
// jobs.cc (construction, the scheduler, placement, the client side), job_transitions.cc (how an
// attempt ends, fails or is queued again; LogAndApply), worker_reports.cc (the worker side:
// registration, heartbeats, step, task and checkpoint reports), commits.cc (JobManager's side of
// the committer: what transitions queue, and the CommitterHost calls), calibration.cc
// (parallel.schedule "auto": calibrate, apply AutoPlanRun's decisions, re-plan), shared_cluster.cc
// (placement under the scheduling policy: order, quotas, reservations, preemption; queue
// positions and estimates in answers), elastic_jobs.cc (spec.elastic: shrink and grow),
// step_history.cc (ListJobSteps) and retention.cc
// (picks and drops the jobs that ended longer than ManagerOptions::retain_jobs ago, for the
// committer, which deletes their rows).
//
// Threading: every public method is thread-safe and takes mu_ itself (none may be called with it
// held). mu_ guards every member marked ABSL_GUARDED_BY(mu_) and the state of rpc_ and events_.
// No file or store I/O runs under mu_: a heartbeat never waits on a disk. Outside mu_ run the
// worker RPCs' start (WorkerRpc::Issue, on the scheduler thread), the hashing of checkpoints
// (Committer::VerifyQueued, on the verifier thread, and Resume), the wait of a watcher
// (EventLog::Follow), the reading of a spec's files (planning.h PlanClientSpec: Submit and
// Resume, before they take mu_; under mu_, Reload and Decide plan with PlanJobSpec, which reads
// none), and all store and checkpoint I/O, on the committer thread (Committer, committer.h):
//  - Under mu_, a transition only marks its job's row dirty (LogAndApply, through Persist, which
//    returns a ticket) and a complete checkpoint is only queued (CommitCheckpoint): both go into
//    the Committer's queue. The committer takes the queue, writes each manifest (CommitManifest)
//    without mu_, re-takes mu_ to point the job at it, snapshots every dirty row under mu_, writes
//    the rows without mu_ (under store_mu_), prunes the older checkpoints of the jobs whose row was
//    stored, and re-takes mu_ to record what was stored.
//    One committer thread: the commits of a job happen in the order its ranks completed them.
//  - Expiry (retention.cc) runs on the committer thread too, each kExpiryScan, before the round's
//    rows: it picks the expired jobs under mu_, deletes their rows without mu_ (under store_mu_),
//    and re-takes mu_ to drop them from memory. A job resumed meanwhile is dirty, so that round
//    writes its row again.
//  - Whatever depends on a checkpoint waits for its commit: a rank's end of the live attempt
//    (ReportTask) reported while a commit of its job is in flight is applied once the commits
//    are (so a job ends, fails or restarts knowing the checkpoints its ranks reported first); a
//    requeued job is verified and placed only then; Resume waits for them.
//  - RPCs that answer only once durable wait for their ticket outside mu_
//    (Committer::AwaitStored: Cancel, Resume), or write under store_mu_ alone (Submit stores its
//    row before mu_ is taken). A row that fails to write fails the RPC that waits on it; other
//    failures are logged, and the job's next write retries.
// Lock order: store_mu_ before mu_ (Submit); nothing takes store_mu_ while holding mu_.
#ifndef PP_COORDINATOR_JOBS_H_
#define PP_COORDINATOR_JOBS_H_

#include <deque>
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
#include "coordinator/calibration_run.h"
#include "coordinator/checkpoint_interval.h"
#include "coordinator/commit_queue.h"
#include "coordinator/committer.h"
#include "coordinator/event_log.h"
#include "coordinator/job_logic.h"
#include "coordinator/job_queue.h"
#include "coordinator/job_record.h"
#include "coordinator/kv_access.h"
#include "coordinator/metrics.h"
#include "coordinator/planning.h"
#include "coordinator/policy.h"
#include "coordinator/registry.h"
#include "coordinator/rendezvous.h"
#include "coordinator/resume_checkpoint.h"
#include "coordinator/retention.h"
#include "coordinator/scheduling.h"
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
  // The n-th automatic restart of a job in a row (without a newer checkpoint committed between
  // them: JobRecord::restarts_without_progress) is placed no sooner than restart_backoff *
  // 2^(n-1) after the failure, at most restart_backoff_cap after it (RestartBackoff, job_logic.h):
  // a job that fails at once on every attempt does not spin through its max_restarts.
  absl::Duration restart_backoff = absl::Seconds(1);
  absl::Duration restart_backoff_cap = absl::Seconds(60);
  // A DOWN worker silent this long is forgotten unless it holds a live job's rank.
  absl::Duration down_worker_ttl = kDownWorkerTtl;
  // RunTask, AbortTask and probes dial workers with these; null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> worker_credentials;
  // --data_root: where the files a submitted or resumed spec names may lie (PlanClientSpec).
  std::vector<std::string> data_roots;
  // An ended job unchanged this long is deleted (retention.h); zero keeps ended jobs forever.
  absl::Duration retain_jobs = kDefaultRetainJobs;
  // --policy: priority classes, quotas, aging, preemption (policy.h); null: Policy::Default().
  std::shared_ptr<const Policy> policy;
};

// The committer (committer.h) calls back through CommitterHost, under mu_.
class JobManager : private CommitterHost {
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
  // The job's owner is the caller's name; spec.priority must be a class of the policy the caller
  // may use (InvalidArgument, PermissionDenied), preemptible: false needs an admin, and the
  // owner's max_queued_jobs must not be reached (ResourceExhausted).
  absl::StatusOr<std::string> Submit(const pp::v1::JobSpec& spec, const Caller& caller = Caller{});
  // Get and List fill a QUEUED job's queue_position and estimated_start_seconds.
  absl::StatusOr<pp::v1::Job> Get(const std::string& job_id);
  // One page in submission order (coordinator/list_page.h); INVALID_ARGUMENT for a bad page.
  absl::StatusOr<pp::v1::ListJobsResponse> List(const pp::v1::ListJobsRequest& request);
  absl::StatusOr<pp::v1::Job> Cancel(const std::string& job_id);
  // Queues an ended job again from a verified committed checkpoint (request.step, or the newest),
  // optionally on a new layout (request.parallel) or to a new total of steps (request.steps).
  // The policy's checks of Submit apply again, for `caller`: the class (its value read again into
  // job.priority), preemptible, and the owner's max_queued_jobs.
  absl::StatusOr<pp::v1::Job> Resume(const pp::v1::ResumeJobRequest& request,
                                     const Caller& caller = Caller{});
  std::vector<pp::v1::WorkerInfo> Workers();
  // Whether a job's estimate fits the workers registered now (CheckMemoryFits on a snapshot):
  // what parallel.recompute "auto" is chosen against, at SubmitJob and PlanJob.
  pp::plan::MemoryFits RegisteredMemoryFits();
  absl::StatusOr<pp::v1::StepTrace> Trace(const std::string& job_id, int step);
  // One page of the job's recorded steps from request.from_step (or the page token) on, oldest
  // first (step_history.cc): NotFound for an unknown job, InvalidArgument for a bad page size
  // (0: 1000; at most 10000), from_step or token.
  absl::StatusOr<pp::v1::ListJobStepsResponse> ListSteps(
      const pp::v1::ListJobStepsRequest& request);
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
  // The attempt a RUNNING job runs and the workers placed on it (kv_access.h); nullopt when the
  // job is unknown or not running. Copies them under mu_ and returns.
  std::optional<LiveAttempt> LiveAttemptOf(const std::string& job_id);

  std::string checkpoint_root() const;
  // Replaces the scheduling policy (SIGHUP: ppcoord --policy read again) and places what it lets.
  void SetPolicy(std::shared_ptr<const Policy> policy);

 private:
  // The task a BUSY worker was given (or says it runs).
  struct Held {
    std::string job_id;
    int attempt = 0;
  };

  JobManager(const ManagerOptions& options, std::unique_ptr<JobStore> store,
             CoordinatorMetrics* metrics);
  absl::Status Reload();
  void SchedulerLoop();
  void Tick() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Places the QUEUED jobs the queue offers now (JobQueue::PlacementOrder under the policy's
  // aging; none held), in its order (shared_cluster.cc). A job over its owner's quota waits with
  // the quota's reason unless it may borrow; a job that does not fit the idle workers waits, with
  // the reason in job.reason (WaitReason), preempts lower-priority (or borrowing) jobs when that
  // frees enough workers (PreemptFor), and does not hold back later jobs that fit (backfill)
  // unless it preempts or has waited the policy's reserve_after_seconds at the head of the order:
  // then the idle workers it needs are reserved for it.
  void PlaceQueued() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Submit and Resume, under the lock: the policy's checks of a job about to be QUEUED (`job`: its
  // owner and spec; see Submit) for `caller`; sets job.priority.
  absl::Status Admit(pp::v1::Job& job, const Caller& caller) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Registered workers: IDLE or BUSY.
  int RegisteredWorkers() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One PlaceQueued round's view, kept current as it starts and preempts jobs.
  struct Round {
    std::vector<SchedJob> snapshot;            // JobQueue::Snapshot at the round's start
    std::map<std::string, size_t> index;       // job id -> its snapshot entry
    std::map<std::string, int> owner_workers;  // OwnerWorkers, plus the jobs started since
    std::map<std::string, int> freeing;        // waiting job -> workers its victims free
    int reserved = 0;           // idle workers the jobs tried so far keep from the jobs behind them
    bool first_waiting = true;  // no job of the round has waited yet
  };
  // PlaceQueued for one job of the order: the quota, a placement, else the wait with its reason,
  // preemption and reservation.
  void TryPlace(JobRecord& rec, Round& round, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `waiting` (`me`) lacks `missing` workers beyond the idle ones and those its preemptions in
  // flight free: preempts the jobs ChooseVictims picks, if any. Returns the workers they free.
  int PreemptFor(JobRecord& waiting, const SchedJob& me, int missing, Round& round)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks `victim` to checkpoint after its next step and stop (stop_step), for `waiting`; records
  // the preemption in its row, emits EVENT_PREEMPTED. Its end requeues it (EndAttempt).
  void Preempt(JobRecord& victim, const JobRecord& waiting) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops and requeues each victim still running past its preemption grace (Tick).
  void EnforcePreemptionGrace(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A QUEUED job's place in the queue and its start estimate, for answers.
  struct QueueView {
    int position = 0;
    double estimated_start_seconds = 0;
  };
  std::map<std::string, QueueView> ViewQueue() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void FillQueueView(const std::map<std::string, QueueView>& view, pp::v1::Job& job);
  // ---- elastic jobs (elastic_jobs.cc; elastic.h) ----
  // Resizes the QUEUED `rec` (JobEdit::Resize) to the first layout of LayoutsFor(its base,
  // `workers`) that plans and, when `idle` is given, places on it (the placement into
  // `placement`); emits EVENT_RESIZED saying `why`. False when no layout does: nothing changed.
  bool ResizeTo(JobRecord& rec, int workers, const std::string& why,
                const std::vector<pp::v1::WorkerInfo>* idle = nullptr,
                std::vector<pp::v1::RankPlacement>* placement = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // TryPlace, for a QUEUED job that lacks workers: when it is elastic, waited its grace since it
  // was queued (twice that while workers of its previous attempt are still ending it), and
  // `available` (the first of `idle`) reach its min_workers, resizes it onto them and returns
  // the placement; else nullopt.
  std::optional<std::vector<pp::v1::RankPlacement>> ShrinkToPlace(
      JobRecord& rec, const std::vector<pp::v1::WorkerInfo>& idle, int available, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tick: a RUNNING elastic job below its max_workers, with idle workers that nobody queued waits
  // for, idle for its grow_after without a break, stops after its next step to grow (grow_to).
  void GrowElastic(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // pp_queue_jobs{priority} and pp_owner_workers_in_use{owner} (UpdateGauges).
  void UpdateSharedGauges() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records why a QUEUED job waits: job.reason, persisted and emitted when it changed.
  void NoteWait(JobRecord& rec, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The committer's verifier hashes the checkpoint each requeued job will start from, outside the
  // lock: these name the jobs (none with a commit in flight), then settle each one's start step
  // (an older checkpoint when that one is damaged, step 0 when none verifies) and place what can
  // run.
  std::vector<StartToVerify> StartsToVerify() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyVerified(const std::vector<StartToVerify>& verified) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What PlaceQueued does for one job that fits on `placement`: RUNNING, its workers BUSY, a
  // RunTask to each.
  void Start(JobRecord& rec, std::vector<pp::v1::RankPlacement> placement)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Settles the start step of a requeued job once the verifier checked its checkpoint.
  void SettleStartStep(JobRecord& rec, const absl::StatusOr<pp::common::LatestManifest>& latest)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Resume, under the lock: the checks on the job and the request, and the plan of the next
  // attempt; `attempt` is the ended attempt (Resume applies only if it is still the job's).
  absl::StatusOr<PlannedJob> PlanResume(const pp::v1::ResumeJobRequest& request, int* attempt)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Resume, under the lock again: queues the job from `checkpoint` unless it changed meanwhile;
  // `ticket` is its row's write.
  absl::StatusOr<pp::v1::Job> ApplyResume(const std::string& job_id, int attempt,
                                          PlannedJob planned, const ResumeCheckpoint& checkpoint,
                                          const Caller& caller, int64_t* ticket)
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
  // Moves a job to a terminal state (JobEdit::End): stops its live attempt, persists it, emits the
  // event. Returns Persist's ticket (0 when the edit is illegal: that is only logged).
  int64_t Finish(JobRecord& rec, pp::v1::JobState state, const std::string& reason,
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
  // job's history (at most job.last_checkpoint_step) (JobEdit::Requeue); `automatic` restarts
  // count against max_restarts. Emits EVENT_RESTARTED.
  void Requeue(JobRecord& rec, const std::string& reason, bool automatic,
               const std::string& skip_worker = "") ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends the job's current state as an event of `kind` with `message`; returns it, for the
  // caller to complete.
  pp::v1::JobEvent& Emit(JobRecord& rec, pp::v1::JobEventKind kind, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The one way a job's lifecycle changes (job_record.h): applies `edit` to the job
  // (JobRecord::Apply) and, when its row changed, marks it for the committer (Persist); returns
  // Persist's ticket, 0 when the row did not change. An illegal edit is a bug of the caller: it
  // is logged as an internal error and nothing is applied (ticket 0).
  int64_t LogAndApply(JobRecord& rec, const JobEdit& edit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `edit` may apply now (JobRecord::Check); when not, logs the internal error. For the
  // callers that must know before they stop the live attempt.
  bool MayApply(const JobRecord& rec, const JobEdit& edit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks the job's row for the committer to write (the row as it is then, so writes coalesce);
  // returns the ticket committer_.AwaitStored waits on. Transitions go through LogAndApply; this
  // is for progress (a step) and a row to write again (retention.cc).
  int64_t Persist(JobRecord& rec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Builds the manifest of a complete checkpoint and queues its commit for the committer.
  void CommitCheckpoint(JobRecord& rec, const std::vector<pp::v1::CheckpointReport>& shards)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a rank's end of the live attempt leads to: its error fails the attempt (or waits for its
  // cause, Suspect); once every rank ended well, EndAttempt.
  void ApplyTaskEnd(JobRecord& rec, const pp::v1::TaskReport& report, const std::string& worker)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every rank of the live attempt ended well: SUCCEEDED, or after a drain the next attempt.
  void EndAttempt(JobRecord& rec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ---- the committer's calls back (CommitterHost, commits.cc), on its thread ----
  // The job's row to write (the committer copies it under mu_).
  const pp::v1::Job* RowToStore(const std::string& job_id) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After CommitManifest: points the job at the checkpoint and emits its event.
  void ApplyManifest(PendingCommit& commit) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After the rows were written: ends what waited on the commits (a rank's end, a placement).
  void ApplyStored(const std::deque<PendingCommit>& commits) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGauges() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- expiry of ended jobs (retention.cc), called back by the committer on its thread ----
  // The jobs expired now (Expired, retention.h) whose rows and checkpoints are all written.
  std::vector<Expiring> ExpiredJobs() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The committer deleted their rows: drops each from memory (ForgetExpired).
  void DropExpired(const std::vector<Expiring>& expiring,
                   const std::vector<absl::Status>& deleted) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops an expired job whose row was deleted from jobs_, its events and its metrics; true when
  // it did. A job resumed meanwhile stays, its row marked to be written again.
  bool ForgetExpired(const Expiring& expiring, const absl::Status& deleted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- parallel.schedule "auto" (calibration.cc) ----
  // Whether `held` is the attempt of a QUEUED job whose workers calibrate.
  bool IsCalibrating(const Held& held) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job fits on `placement`: holds those workers and asks each to calibrate, or, with a
  // calibration of the same model shape on the same workers cached, decides at once.
  void BeginCalibration(JobRecord& rec, std::vector<pp::v1::RankPlacement> placement)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A Calibrate RPC came back.
  void CalibrationAnswered(const Outbound& rpc, const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the workers of the calibration in flight, if any.
  void ReleaseCalibration(JobRecord& rec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies the plan the job's AutoPlanRun chose from `calibration` (AutoPlanRun::Decide): the
  // spec, schedule and job.plan, then starts the job on `placement`'s workers; a job that fits
  // nowhere FAILS with the planner's reason.
  void Decide(JobRecord& rec, std::vector<pp::v1::RankPlacement> placement,
              pp::v1::Calibration calibration) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A step of a decided job (AutoPlanRun::OnStep): caches a trial's refit, records the
  // prediction error, and calls the re-plan the step calls for.
  void CheckPrediction(JobRecord& rec, const StepSummary& summary)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops the job after its next step to re-plan from that checkpoint, for `why`
  // (AutoPlanRun::Replan); `from_refit`: from its calibration refitted by the trial, not measured
  // again. Nothing when it may not (max_replans, already stopping, about to end).
  void CallReplan(JobRecord& rec, const std::string& why, bool from_refit)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ManagerOptions options_;
  CoordinatorMetrics* const metrics_;
  RendezvousStore rendezvous_;  // thread-safe on its own

  // JobStore is not thread-safe; its calls take a few ms, or seconds when the disk is slow or
  // the database is locked (busy timeout), so never under mu_.
  absl::Mutex store_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::unique_ptr<JobStore> store_ ABSL_GUARDED_BY(store_mu_);

  absl::Mutex mu_;
  WorkerRpc rpc_;    // guarded by mu_ (see worker_rpc.h)
  EventLog events_;  // guarded by mu_ (see event_log.h)
  std::map<std::string, JobRecord> jobs_ ABSL_GUARDED_BY(mu_);
  JobQueue queue_ ABSL_GUARDED_BY(mu_);  // submission order, and which QUEUED job to place next
  WorkerTable workers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Held> held_ ABSL_GUARDED_BY(mu_);  // BUSY workers' tasks
  // The calibrations measured (calibration_run.h): an "auto" job on the same workers and shape
  // is not calibrated again.
  CalibrationCache calibrations_ ABSL_GUARDED_BY(mu_);
  // checkpoint.autoEverySteps: the attempts that failed (Fail) over the worker-seconds run
  // (LogAndApply), since this ppcoord started; read at each placement (Start).
  FailureRate failure_rate_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const Policy> policy_ ABSL_GUARDED_BY(mu_);  // never null
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread scheduler_;
  // The store and checkpoint I/O, on its committer and verifier threads (committer.h); its queue
  // (rows to write, checkpoints to commit in order, step records, what it wrote) is under mu_.
  Committer committer_;
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_JOBS_H_
