// Pure job bookkeeping of ppcoord (internal): the state machine, aggregation of per-rank step and
// checkpoint reports, and the measured bubble ratio. No locks, no RPC, no clock.
#ifndef PP_COORDINATOR_JOB_LOGIC_H_
#define PP_COORDINATOR_JOB_LOGIC_H_

#include <map>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pp/v1/coordinator.pb.h"
#include "pp/v1/job.pb.h"
#include "pp/v1/schedule.pb.h"

namespace pp::coordinator {

bool IsTerminal(pp::v1::JobState state);

// QUEUED -> RUNNING | FAILED | CANCELLED; RUNNING -> SUCCEEDED | FAILED | CANCELLED | QUEUED
// (a restart); SUCCEEDED | FAILED | CANCELLED -> QUEUED (a resume). Anything else is
// FailedPrecondition naming both states.
absl::Status CheckTransition(pp::v1::JobState from, pp::v1::JobState to);

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
  pp::v1::StepTrace trace;  // ranks in rank order
};

// Collects StepReports of one job attempt; a step completes when all `world` ranks reported it.
class StepAggregator {
 public:
  explicit StepAggregator(int world) : world_(world) {}

  // Returns the summary when `report` completes its step. Reports of an unknown rank are ignored.
  std::optional<StepSummary> Add(const pp::v1::StepReport& report);

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

 private:
  int world_;
  std::map<int, std::map<int, pp::v1::CheckpointReport>> pending_;  // step -> rank -> report
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_JOB_LOGIC_H_
