// checkpoint.autoEverySteps (internal): the checkpoint interval ppcoord chooses for a job at each
// placement from the measured cost of its checkpoints and the failure rate ppcoord observed
// (docs/recovery.md "Automatic checkpoint interval"). Pure: no locks, no RPC, no clock (callers
// pass the time); every figure is an input.
//
// The model: a job that computes tau seconds between checkpoints, each costing C seconds, on
// machines failing every M seconds on average, wastes about C / tau + tau / (2M) of its time.
//  - Young 1974 ("A first order approximation to the optimum checkpoint interval", CACM 17(9))
//    minimises that first-order waste: tau = sqrt(2 C M).
//  - Daly 2006 ("A higher order estimate of the optimum checkpoint interval for restart dumps",
//    FGCS 22(3)) keeps the higher-order terms of the exponential failure model:
//    tau = sqrt(2 C M) [1 + sqrt(C / 2M) / 3 + (C / 2M) / 9] - C  for C < 2M, else tau = M.
//    The restart time R drops out of the optimum in both.
// ppcoord uses Daly's; tau / (median step seconds) rounded is the interval in steps.
//
// Threading: none of its own. JobManager keeps a CheckpointCost in each JobRecord and one
// FailureRate, all under its mu_ (jobs.h).
#ifndef PP_COORDINATOR_CHECKPOINT_INTERVAL_H_
#define PP_COORDINATOR_CHECKPOINT_INTERVAL_H_

#include <cstddef>
#include <deque>
#include <optional>
#include <string>

#include "pp/v1/job.pb.h"

namespace pp::coordinator {

// The first attempt's interval of an auto job whose checkpoint.every_steps is 0.
inline constexpr int kDefaultAutoEverySteps = 50;
// Samples of each kind a CheckpointCost keeps: the newest, so memory stays bounded and the
// estimate follows a job whose storage or layout changed.
inline constexpr size_t kCostSamples = 64;
// A measured cost below this share of the step time counts as this share: the estimator cannot
// resolve a stall within the steps' own jitter, and a cost of 0 would make Young's interval 0,
// a checkpoint after every step.
inline constexpr double kMinCostFraction = 0.01;

// Young 1974: sqrt(2 C M) seconds of compute between checkpoints. 0 when an input is <= 0.
double YoungIntervalSeconds(double cost_seconds, double mtbf_seconds);
// Daly 2006, higher order: sqrt(2 C M) [1 + sqrt(C/2M)/3 + (C/2M)/9] - C for C < 2M, else M.
// 0 when an input is <= 0.
double DalyIntervalSeconds(double cost_seconds, double mtbf_seconds);

// Daly's interval in steps of `step_seconds`, rounded, clamped to [min_steps, max_steps]
// (REQUIRES 1 <= min_steps <= max_steps). nullopt when the cost is unknown (negative or not
// finite), the step time is not > 0 or not finite, or the MTBF is not > 0. An infinite MTBF gives
// max_steps.
std::optional<int> IntervalSteps(double cost_seconds, double mtbf_seconds, double step_seconds,
                                 int min_steps, int max_steps);

// What one checkpoint costs a job, from its completed steps (StepAggregator summaries).
//
// A rank reports step s before it writes the checkpoint due after s (worker/daemon/task.cc
// RunSteps): the checkpoint's stall (copying the shard out, an inline write, waiting for the
// previous async write, the write's contention) falls into step s + 1, never into s. And the
// copy delays every rank alike, so it mostly hides from their step_seconds (each measures from its
// own start): the wall time between the completions of s and s + 1 at ppcoord shows it. A step's
// seconds are therefore max(its slowest rank's step_seconds, wall seconds since the previous step
// completed); the cost is median(seconds of steps right after a checkpoint) - median(seconds of
// the other steps), at least 0; the step time is the latter median.
// Not counted: a step whose predecessor did not complete in the same attempt (an attempt's first
// step: loading and warm-up; a dropped step), and a step after which an eval ran (its wall time
// holds the eval).
class CheckpointCost {
 public:
  // The step `step` of attempt `attempt` completed at `now_unix`, its slowest rank reporting
  // `step_seconds`. `spec`: the attempt's (checkpoint.every_steps, train.steps, eval).
  void AddStep(const pp::v1::JobSpec& spec, int attempt, int step, double step_seconds,
               double now_unix);

  // median(after checkpoints) - median(others), at least 0; nullopt without a sample of each.
  std::optional<double> CostSeconds() const;
  // median(others); nullopt without one.
  std::optional<double> StepSeconds() const;
  size_t after_checkpoint_samples() const { return after_checkpoint_.size(); }
  size_t plain_samples() const { return plain_.size(); }

 private:
  std::deque<double> after_checkpoint_;  // newest kCostSamples
  std::deque<double> plain_;             // newest kCostSamples
  int last_attempt_ = -1;
  int last_step_ = -1;
  double last_unix_ = 0;
};

// The cluster's failure rate per worker-second: attempts ppcoord saw fail over the workers x
// seconds attempts ran, with a prior of kPriorFailures in kPriorWorkerSeconds as pseudo-
// observations (the inverse of the posterior mean of a Poisson rate under a Gamma prior). It gives
// a cluster that never failed a finite MTBF and keeps one early failure from swinging it; it is one
// failure per worker per week: pessimistic for datacenter GPUs, which errs toward checkpoints too
// often, the cheaper error. Its weight fades once the cluster ran a few worker-weeks. The interval
// goes with sqrt(M), and near the optimum the waste is flat: an M off by 4x gives an interval off
// by k = 2x, which wastes (k + 1/k) / 2 = 1.25 times the least.
class FailureRate {
 public:
  static constexpr double kPriorFailures = 1;
  static constexpr double kPriorWorkerSeconds = 7 * 24 * 3600.0;

  void AddFailure() { ++failures_; }
  // Ignores a negative or non-finite `worker_seconds`.
  void AddWorkerSeconds(double worker_seconds);

  // (kPriorWorkerSeconds + worker-seconds) / (kPriorFailures + failures).
  double WorkerMtbfSeconds() const;
  // A job fails when any of its `workers` does: WorkerMtbfSeconds / max(workers, 1).
  double JobMtbfSeconds(int workers) const;
  int failures() const { return failures_; }
  double worker_seconds() const { return worker_seconds_; }

 private:
  int failures_ = 0;
  double worker_seconds_ = 0;
};

// The interval chosen for an auto job at a placement, and what it came from.
struct IntervalChoice {
  int every_steps = 0;
  bool measured = false;    // false: no cost or step time yet; every_steps kept (0: the default)
  double cost_seconds = 0;  // measured, before kMinCostFraction
  double used_cost_seconds = 0;  // what the formula used
  double step_seconds = 0;
  double mtbf_seconds = 0;  // the job's: the worker MTBF / its workers
};

// Daly's interval for `spec` on `workers` workers, clamped to [1, train.steps]; without a
// measured cost and step time: spec's every_steps, or kDefaultAutoEverySteps when it is 0.
IntervalChoice ChooseEverySteps(const pp::v1::JobSpec& spec, const CheckpointCost& cost,
                                const FailureRate& failures, int workers);

// For the log line: "checkpoint every 476 steps (Daly 2006: cost 3.00 s, MTBF ...)".
std::string DescribeChoice(const IntervalChoice& choice, const FailureRate& failures, int workers);

// At a placement (job.placement set): for an auto job (spec.checkpoint.auto_every_steps), sets
// spec.checkpoint.every_steps to ChooseEverySteps on its placement's workers and returns the log
// line (the job, the attempt, the interval and its inputs). "" and nothing changed for any other.
std::string ApplyAutoEverySteps(pp::v1::Job& job, const CheckpointCost& cost,
                                const FailureRate& failures);

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_CHECKPOINT_INTERVAL_H_
