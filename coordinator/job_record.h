// One job as ppcoord keeps it in memory (internal): its stored row (pp::v1::Job), its plan, and
// the bookkeeping of its live attempt. Its lifecycle changes only by edits, values that say what
// one transition sets (JobEdit), applied by JobRecord::Apply, which refuses an illegal one, in the
// style of leveldb's VersionEdit: JobManager::LogAndApply (jobs.h) applies an edit and marks the
// job's row for the committer, as VersionSet::LogAndApply applies one and logs it.
//
// Invariants (Apply keeps them; nothing else writes the fields they name):
//  - job().state() moves only as CheckTransition (job_logic.h) allows, and only as the edit's kind
//    says: kPlace QUEUED -> RUNNING; kEnd QUEUED | RUNNING -> SUCCEEDED | FAILED | CANCELLED;
//    kRequeue RUNNING -> QUEUED (a restart); kResume SUCCEEDED | FAILED | CANCELLED -> QUEUED.
//    kWait, kBackoff, kSettleStart and kResize keep a QUEUED job QUEUED; kCheckpoint keeps any
//    state.
//  - job().attempt() grows by one at each kRequeue and kResume, and only then; it names the live
//    attempt: the one running, or the one waiting to be placed. Each new attempt appends its
//    entry to job().restart_log() (StartNextAttempt, job_logic.h).
//  - job().worker_seconds() grows by placement size x time placed each time a RUNNING attempt ends
//    (kEnd, kRequeue); job().queued_unix() is the time of the kRequeue or kResume that queued it
//    (Submit sets it first).
//  - job().spec()'s layout changes only by kResume and kResize; kResize counts job().resizes()
//    and keeps the layout it started from in job().base_parallel() (kResume clears it).
//  - job().last_checkpoint_step() only grows (kCheckpoint), except that kResume sets it to the
//    step the job resumes from.
//  - verify_pending(): QUEUED with start_step a checkpoint not verified yet; set by kRequeue,
//    cleared by kSettleStart and kResume.
//  - waiting(): job().reason() says why the QUEUED job waits (kWait), not why its attempt began;
//    kPlace puts the attempt's reason back.
// An illegal edit changes nothing and is an error: a bug of the caller, which reports it.
//
// Threading: none of its own. JobManager keeps every JobRecord under its mu_ (jobs.h).
#ifndef PP_COORDINATOR_JOB_RECORD_H_
#define PP_COORDINATOR_JOB_RECORD_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/auto_plan_run.h"
#include "coordinator/calibration_run.h"
#include "coordinator/checkpoint_interval.h"
#include "coordinator/job_logic.h"
#include "pp/v1/coordinator.pb.h"
#include "pp/v1/job.pb.h"
#include "pp/v1/schedule.pb.h"

namespace pp::coordinator {

// One change of a job's lifecycle, as a value: what the transition sets. Built by the factory of
// its kind; JobRecord::Apply checks it against the job's state and applies it.
struct JobEdit {
  enum class Kind {
    kPlace,    // the live attempt starts on `placement`: RUNNING
    kEnd,      // a final `state`, for `reason`
    kRequeue,  // a restart: the next attempt, from `from_step`, QUEUED
    kResume,   // an ended job's next attempt, from the verified checkpoint `from_step`, on `spec`
    kWait,     // a QUEUED job waits, for `reason`
    kBackoff,  // a QUEUED job is not placed before `not_before`
    kSettleStart,  // a requeued job's checkpoint was verified: it starts from `from_step`
    kCheckpoint,   // the checkpoint of step `from_step` was committed
    kResize,       // an elastic QUEUED job's next attempt runs on `spec`'s layout, for `reason`
  };

  static JobEdit Place(std::vector<pp::v1::RankPlacement> placement, double now_unix);
  static JobEdit End(pp::v1::JobState state, std::string reason, double now_unix);
  // `automatic` restarts count against max_restarts; `not_before` is the restart's backoff.
  static JobEdit Requeue(int from_step, std::string reason, bool automatic, absl::Time not_before,
                         double now_unix);
  // `train_windows`: the data's, read again at the resume.
  static JobEdit Resume(int from_step, std::string reason, pp::v1::JobSpec spec,
                        int64_t train_windows, double now_unix);
  static JobEdit Wait(std::string reason, double now_unix);
  static JobEdit Backoff(absl::Time not_before);
  static JobEdit SettleStart(int from_step);
  static JobEdit Checkpoint(int step);
  static JobEdit Resize(pp::v1::JobSpec spec, std::string reason, double now_unix);

  Kind kind = Kind::kWait;
  pp::v1::JobState state = pp::v1::JOB_STATE_UNSPECIFIED;  // kEnd
  std::string reason;      // kEnd, kRequeue, kResume, kWait, kResize
  int from_step = 0;       // kRequeue, kResume, kSettleStart; the step of kCheckpoint
  bool automatic = false;  // kRequeue
  absl::Time not_before = absl::InfinitePast();  // kRequeue, kBackoff
  std::vector<pp::v1::RankPlacement> placement;  // kPlace
  std::optional<pp::v1::JobSpec> spec;           // kResume, kResize
  int64_t train_windows = 0;                     // kResume
  double now_unix = 0;  // updated_unix of kPlace, kEnd, kRequeue, kResume, kWait, kResize
};

// A rank's ReportTask of a live attempt, with the worker it came from.
struct TaskEnd {
  pp::v1::TaskReport report;
  std::string worker;
};

class JobRecord {
 public:
  explicit JobRecord(pp::v1::Job job) : job_(std::move(job)) {}
  JobRecord(JobRecord&&) = default;
  JobRecord& operator=(JobRecord&&) = default;

  // Whether `edit` may apply to the job as it is (the invariants above); Internal, naming the job,
  // the edit and the state, when not.
  absl::Status Check(const JobEdit& edit) const;
  // Applies `edit` when Check allows it: true when the stored row changed (the caller marks it to
  // be written). An illegal edit changes nothing and returns Check's error.
  absl::StatusOr<bool> Apply(const JobEdit& edit);

  const pp::v1::Job& job() const { return job_; }
  // For the fields no edit covers (progress, plan, spec of a decided plan, eval). REQUIRES: not
  // the fields of the invariants above (state, attempt, start_step, placement, restart_log,
  // last_checkpoint_step, the reason of a transition): those change only by Apply.
  pp::v1::Job* mutable_job() { return &job_; }
  bool verify_pending() const { return verify_pending_; }
  absl::Time not_before() const { return not_before_; }
  bool waiting() const { return waiting_; }
  // When the live attempt was placed (kPlace); 0 when it was not placed by this process.
  double placed_unix() const { return placed_unix_; }
  // Automatic restarts (kRequeue) since a checkpoint newer than its attempt's start was committed
  // (kCheckpoint): what the restart backoff doubles with, so a job that makes progress between
  // failures is not held longer and longer, while one failing at once on every attempt is.
  int restarts_without_progress() const { return restarts_without_progress_; }

  // ---- the plan of the live attempt (planning.h PlannedJob) ----
  pp::v1::Schedule schedule;
  std::vector<int> stage_units;
  std::vector<int64_t> rank_bytes;  // estimated peak memory per global rank (RankBytes)

  // ---- the live attempt's progress: reset by kPlace ----
  std::unique_ptr<StepAggregator> steps;
  std::unique_ptr<CheckpointCollector> checkpoints;
  std::set<int> ranks_done;
  bool drained = false;  // a rank stopped at stop_step (a worker drains)
  int stop_step = 0;     // >0: every rank checkpoints and stops after it
  int newest_reported_step = 0;
  // The step every rank can still stop after (drain, preemption): the one after the newest
  // reported (each rank still reports it, worker_reports.cc), or the last step. Not newest + 1
  // first: at train.steps == INT_MAX that overflows.
  int NextCommonStopStep() const {
    const int steps = job_.spec().train().steps();
    return newest_reported_step < steps ? newest_reported_step + 1 : steps;
  }
  std::set<std::string> leaving_workers;  // asked to drain: not placed again
  // A higher-priority job's id when this attempt is stopping to free its workers for it
  // (shared_cluster.cc), and when it must have stopped (the policy's grace).
  std::string preempted_for;
  absl::Time preempt_deadline = absl::InfiniteFuture();
  bool borrowing = false;  // placed past its owner's max_workers (Quota.borrow)
  // ---- elastic jobs (elastic_jobs.cc) ----
  // Since when idle workers would let the RUNNING attempt grow (InfiniteFuture: not now); reset
  // by kPlace and whenever they would not.
  absl::Time grow_since = absl::InfiniteFuture();
  // The idle workers (names, comma-separated) a shrink found no layout for (ShrinkToPlace): it
  // plans again only once they change, not at every tick under the lock.
  std::string shrink_failed_on;
  // >0: the attempt stops at stop_step to grow, and the next one is resized for this many
  // workers before it is placed. Outlives the requeue; cleared once applied.
  int grow_to = 0;
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

  // ---- its commits (commits.cc) ----
  // Checkpoints queued for the committer and not applied yet, and the newest of their steps.
  int commits_in_flight = 0;
  int newest_commit_in_flight = 0;
  // Task ends reported while commits were in flight: ApplyTaskEnd once they are applied.
  std::vector<TaskEnd> reports_after_commits;

  // ---- parallel.schedule "auto" (calibration.cc) ----
  // The calibration in flight (calibration_run.h): its workers are held BUSY for its attempt
  // while the job is QUEUED (JobQueue holds the job meanwhile).
  std::optional<CalibrationRun> calibrating;
  // The rest of the auto-plan run (auto_plan_run.h): whether to calibrate before the next
  // placement, the failures in a row, the trial steps and the re-plan called; idle for a job of
  // a fixed schedule.
  AutoPlanRun auto_plan;
  // checkpoint.autoEverySteps (checkpoint_interval.h): the cost of its checkpoints, from the
  // steps of every attempt (worker_reports.cc); read at each placement (jobs.cc Start).
  CheckpointCost checkpoint_cost;

 private:
  void Place(const JobEdit& edit);
  void StartNext(const JobEdit& edit);
  void Resize(const JobEdit& edit);
  bool SettleStart(int from_step);
  // Adds the RUNNING attempt's workers x seconds to job().worker_seconds() as it ends.
  void CountWorkerSeconds(double now_unix);

  pp::v1::Job job_;
  bool verify_pending_ = false;
  absl::Time not_before_ = absl::InfinitePast();
  bool waiting_ = false;
  double placed_unix_ = 0;  // the live attempt's kPlace; 0 when not placed by this process
  int restarts_without_progress_ = 0;
};

// The name of an edit's kind, for messages: "place", "end", ...
const char* JobEditName(JobEdit::Kind kind);

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_JOB_RECORD_H_
