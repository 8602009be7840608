// The scheduling decisions of a shared cluster (internal): priorities with aging, fair share
// between owners, quotas, the choice of preemption victims and start estimates. Pure, in the
// style of job_logic.h: no locks, no RPC, no clock (callers pass `now_unix`). JobQueue and
// JobManager (jobs.h) copy what they know of each job into a SchedJob and apply the answers.
// The policy they implement is docs/jobs.md "Priorities, quotas and preemption".
#ifndef PP_COORDINATOR_SCHEDULING_H_
#define PP_COORDINATOR_SCHEDULING_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pp/v1/job.pb.h"
#include "pp/v1/policy.pb.h"

namespace pp::coordinator {

// What scheduling needs of one job.
struct SchedJob {
  std::string id;
  std::string owner;
  int64_t order = 0;  // submission order: smaller is older
  int priority = 0;   // Job.priority: its class's value
  bool preemptible = true;
  // QUEUED or RUNNING; an ended job counts only in OwnerUsage (its worker_seconds)
  pp::v1::JobState state = pp::v1::QUEUED;
  int workers = 0;            // QUEUED: workers it needs; RUNNING: workers it holds
  double queued_unix = 0;     // QUEUED: when it became QUEUED
  double worker_seconds = 0;  // its ended attempts' workers x seconds
  // ---- RUNNING ----
  double started_unix = 0;             // its live attempt's placement
  int step = 0;                        // newest completed step
  int last_checkpoint_step = 0;        // newest committed checkpoint (its start step if none since)
  int total_steps = 0;                 // spec.train.steps
  double step_seconds = 0;             // its newest step's time; 0: none measured yet
  bool borrowing = false;              // started past its owner's max_workers (Quota.borrow)
  bool stopping = false;               // asked to stop already (a preemption, drain or re-plan)
  std::vector<double> preempted_unix;  // Job.preempted_unix
};

// `job`'s priority plus its aging boost: aging.step for each whole aging.every_seconds it has
// been QUEUED at `now_unix`, at most aging.max_boost. No boost for a RUNNING job or without aging.
int EffectivePriority(const SchedJob& job, const pp::v1::Aging& aging, double now_unix);

// Each owner's usage in workers x seconds: every job's ended attempts (worker_seconds, ended jobs
// included) plus each RUNNING job's workers x (now_unix - started_unix). Fair share orders owners
// by it, least first; which ended jobs count is the caller's choice (JobQueue: the last hour).
std::map<std::string, double> OwnerUsage(const std::vector<SchedJob>& jobs, double now_unix);
// The workers each owner's RUNNING jobs hold.
std::map<std::string, int> OwnerWorkers(const std::vector<SchedJob>& jobs);

// The ids of the QUEUED jobs of `jobs` in the order to try them: effective priority, highest
// first; then the owner's usage (OwnerUsage over all of `jobs`), least first; then submission
// order, oldest first. A strict total order: equal keys cannot happen (order is unique).
std::vector<std::string> OrderQueued(const std::vector<SchedJob>& jobs, const pp::v1::Aging& aging,
                                     double now_unix);

// Whether `job` may start now under its owner's quota (null: no limit) when the owner's RUNNING
// jobs hold `owner_workers` workers and it needs job.workers more.
struct QuotaVerdict {
  bool within = true;       // owner_workers + job.workers <= max_workers (or no limit)
  bool may_borrow = false;  // not within, but the quota lets it borrow (Quota.borrow)
  std::string reason;       // when not within: "owner bob uses 6 of 6 workers; the job needs 2"
};
QuotaVerdict CheckQuota(const SchedJob& job, int owner_workers, const pp::v1::Quota* quota);

// Which RUNNING jobs to preempt so that `waiting` can start, when it needs `missing` workers more
// than are idle or already being freed. A running job may be a victim when it is preemptible, not
// stopping, not in its last step (total_steps - 1 done: it ends as soon as it would drain),
// preempted fewer than preemption.max_per_hour times in the hour before `now_unix`, and
// either its priority (the class value, without aging: an aged job never preempts the job that
// preempted it) is below waiting.priority, or it is borrowing while `waiting_within_quota`.
// Candidates are taken lowest priority first, then the least work lost (steps since its newest
// checkpoint x step time), then the youngest (latest started_unix), then the newest submitted,
// until their workers cover `missing`. Empty when they cannot cover it (nothing is preempted in
// vain), when missing <= 0, or when preemption.disabled.
std::vector<std::string> ChooseVictims(const SchedJob& waiting, bool waiting_within_quota,
                                       int missing, const std::vector<SchedJob>& jobs,
                                       const pp::v1::Preemption& preemption, double now_unix);

// Estimated seconds from now until each QUEUED job of `ordered` (in the order to try) starts: a
// list-scheduling replay where each RUNNING job of `jobs` frees its workers after
// (total_steps - step) x step_seconds, and at each such release the queued jobs, in order, take
// what fits (backfill, as PlaceQueued does), starting with `idle_workers` now. A queued job's own
// run time is unknown, so the workers it takes are not freed again in the replay; a job that
// cannot start in it, or whose start waits for a running job with no measured step time, is
// left out (unknown). Jobs that fit now get 0.
std::map<std::string, double> EstimateStarts(const std::vector<std::string>& ordered,
                                             const std::vector<SchedJob>& jobs, int idle_workers);

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_SCHEDULING_H_
