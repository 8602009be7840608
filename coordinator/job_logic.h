// Pure job bookkeeping of ppcoord (internal): the state machine, job ids, attempts, events,
// aggregation of per-rank step and checkpoint reports, and the measured bubble ratio. No locks, no
// RPC, no clock (callers pass the time); the one side effect is the log line of a dropped step.
#ifndef PP_COORDINATOR_JOB_LOGIC_H_
#define PP_COORDINATOR_JOB_LOGIC_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pp/v1/coordinator.pb.h"
#include "pp/v1/job.pb.h"
#include "pp/v1/schedule.pb.h"

namespace pp::coordinator {

bool IsTerminal(pp::v1::JobState state);

// QUEUED -> RUNNING | FAILED | CANCELLED; RUNNING -> SUCCEEDED | FAILED | CANCELLED | QUEUED
// (a restart); SUCCEEDED | FAILED | CANCELLED -> QUEUED (a resume). Anything else is
// FailedPrecondition naming both states.
absl::Status CheckTransition(pp::v1::JobState from, pp::v1::JobState to);

// "<name>-<sequence>" with the name reduced to [a-z0-9-] (at most 40 characters; "job" when
// nothing is left) so ids are safe in paths, keys and labels.
std::string MakeJobId(const std::string& name, int64_t sequence);

// A worker's error text as a job keeps it (Job.reason, events, logs): at most
// kMaxReportedTextBytes of it, cut on a UTF-8 character boundary, then how many bytes were cut.
// A report may carry megabytes (up to gRPC's message limit); kept whole in every job's reason it
// would grow ppcoord's memory and store, and one job could outgrow a ListJobs page.
inline constexpr size_t kMaxReportedTextBytes = 4096;
std::string ReportedText(const std::string& text);

// The event a job emits when it ends in `state`: FINISHED, CANCELLED, else FAILED.
pp::v1::JobEventKind FinalEventKind(pp::v1::JobState state);

// Whether a watch ends after an event of `kind` (the job ended).
bool EndsWatch(pp::v1::JobEventKind kind);

// The rank `worker` holds in job.placement; -1 when none.
int RankOfWorker(const pp::v1::Job& job, const std::string& worker);

// Sets job.step and, when job.train_windows (K) is known, job.epoch of that step (common/epoch.h):
// every change of the step goes through here, so GetJob, ListJobs and the store agree.
void SetStep(pp::v1::Job& job, int step);

// The job's current state as an event stamped `now_unix`: its kind says the state (QUEUED; PLACED
// or STEP while running; the final kind once ended), its message is job.reason.
pp::v1::JobEvent SnapshotEvent(const pp::v1::Job& job, double now_unix);

// The newest restarts a job's restart_log keeps (job.restarts still counts them all): the row is
// rewritten at every step, so it must not grow with every restart of a long-lived job.
inline constexpr int kMaxRestartLog = 32;

// The next attempt of `job` starts at `from_step` for `reason`: bumps job.attempt, sets start_step,
// step, reason and updated_unix, and appends the attempt to job.restart_log, dropping the oldest
// entries beyond kMaxRestartLog.
void StartNextAttempt(pp::v1::Job& job, int from_step, const std::string& reason, bool automatic,
                      double now_unix);

// How long automatic restart number `restart` (1 = the first) waits before it may be placed:
// `base` doubled for each restart before it, at most `cap`; zero for restart < 1. The doubling
// stops at the cap, so no restart count overflows it.
absl::Duration RestartBackoff(int restart, absl::Duration base, absl::Duration cap);

// Why a QUEUED job is not placed: "needs 8 workers, 2 registered, 0 idle" (registered: not DOWN).
std::string WaitReason(int needed, int registered, int idle);

// Idle share of the step over all ranks, the planner's one bubble definition (IdleFraction,
// coordinator/plan/timeline.h) with each rank's reported busy seconds over the slowest rank's
// step: 1 - sum(busy) / (ranks * max(step seconds)). 0 when no time was measured.
double MeasuredBubble(const std::vector<pp::v1::StepReport>& reports);

// A step every rank has reported.
struct StepSummary {
  int step = 0;
  double loss = 0;          // mean of the reports that carry a loss (one per data replica)
  double step_seconds = 0;  // slowest rank
  double bubble_ratio = 0;
  bool skipped = false;     // a rank says the update was not applied (non-finite values)
  double grad_norm = 0;     // global gradient norm before clipping (every rank reports the same)
  pp::v1::StepTrace trace;  // ranks in rank order
};

// Steps an aggregator keeps waiting for missing ranks. Ranks report their steps in order, so a
// step still incomplete when a later one completes never will, and is dropped then; the cap
// bounds the rest (ranks that run ahead while one never reports). Each drop is one log line.
inline constexpr int kMaxPendingSteps = 64;

// Collects StepReports of one job attempt; a step completes when all `world` ranks reported it.
class StepAggregator {
 public:
  explicit StepAggregator(int world) : world_(world) {}

  // Returns the summary when `report` completes its step. Reports of an unknown rank are ignored.
  std::optional<StepSummary> Add(const pp::v1::StepReport& report);

  size_t pending_steps() const { return pending_.size(); }

 private:
  int world_;
  std::map<int, std::map<int, pp::v1::StepReport>> pending_;  // step -> rank -> report
};

// Collects the shard reports of checkpoint steps; a step is complete when all `world` ranks
// reported ok (one shard per rank).
class CheckpointCollector {
 public:
  explicit CheckpointCollector(int world) : world_(world) {}

  // The step's reports in rank order once complete; an error naming the rank when a rank
  // reports a failed shard (the step is then dropped); nullopt while ranks are missing.
  absl::StatusOr<std::optional<std::vector<pp::v1::CheckpointReport>>> Add(
      const pp::v1::CheckpointReport& report);

  size_t pending_steps() const { return pending_.size(); }

 private:
  int world_;
  std::map<int, std::map<int, pp::v1::CheckpointReport>> pending_;  // step -> rank -> report
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_JOB_LOGIC_H_
