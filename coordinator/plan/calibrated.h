// parallel.schedule "auto" at run time: from what calibrating the placed workers measured
// (pp.v1.Calibration: per-unit times on each worker, the link to the next rank, free memory) to a
// job's schedule, V, M, partition and recomputation (docs/planner.md "Auto at run time").
//
// The search, at a fixed global batch B = train.microbatches x train.microbatch_size sequences:
//   schedule   every one that trains (program/schedules.h)
//   V          ChunkChoices up to auto_plan.max_chunks, or parallel.chunks alone when set
//   M          the divisors of B from min(D, B) up to auto_plan.max_microbatches,
//              thinned to kMaxCalibratedSizes (microbatch size B / M), or the one
//              `fixed_microbatches` (a re-plan keeps M: the same microbatches, the same bits)
//   partition  uniform, params, cost (the FLOP estimate) and measured: the min-max split of the
//              units under the calibrated times of each stage's own rank
//   recompute  none; when a rank's estimate (memory.h) exceeds its worker's free memory, the
//              first of selective and full that fits
// Each candidate is simulated (simulate.h) with every stage's own costs: the sum of its units'
// calibrated times at that microbatch size on the worker of its rank; the boundary transfer
// costs the slowest link's latency plus (B / M) x T x C x 4 bytes over its bandwidth. The
// predicted step is the makespan plus the slowest rank's optimizer time plus the gradient norm's
// all-gather ((D - 1) link latencies). Ranks whose workers report one machine share its cores
// (calibrated_hosts.h): their compute times are scaled back to a rank alone and the step is
// simulated with processor sharing (simulate.h), and the reason says so ("4 ranks on 2 cores").
// The shortest predicted step that fits wins; ties keep the first in the order above (fewer
// chunks, fewer microbatches).
//
// Trial steps: what the units' timing cannot show is how a loaded machine handles messages and
// the end of a step. Once a decided job has run auto_plan.trial_steps traced steps (after its
// first), the coordinator fits them (plan.h FitStepOverheads) into calibration.trial, and from
// then on, for this job and for later jobs on the cached calibration, every compute action of
// a candidate costs trial.action_seconds more (what running an action costs a loaded machine
// beyond the units' timed compute, fitted on the trial plan's own span: RefitWithTrial), its
// SENDs cost trial.send_seconds on their rank (CostModel.send_overhead, shared like compute), a
// message takes at least trial.latency_seconds, and the step's tail is trial.tail_seconds instead
// of the optimizer and the gather above (bench/NOTES.md "Planner": on 4 ranks sharing 2 cores,
// messages wait 1-2 ms for a wake-up, not the idle link's 0.1 ms, and the tail is 12-20 ms).
//
// Pure: no locks, no RPC, no clock.
#ifndef PP_COORDINATOR_PLAN_CALIBRATED_H_
#define PP_COORDINATOR_PLAN_CALIBRATED_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pp/v1/job.pb.h"

namespace pp::plan {

// The most microbatch sizes one calibration times (the worker's bound too).
inline constexpr int kMaxCalibratedSizes = 16;

// Bytes of one microbatch's boundary activation (sequences x T x C floats): what a stage sends.
inline double BoundaryBytes(const pp::v1::ModelSpec& model, int sequences) {
  return 4.0 * sequences * model.seq_len() * model.d_model();
}

struct CalibratedPlan {
  // The job's spec with the choice written in: parallel.schedule, chunks, partition "explicit"
  // with stage_layers, recompute; train.microbatches and microbatch_size. auto_plan stays.
  pp::v1::JobSpec spec;
  std::string chosen;  // "zb-v V=2 M=8 stages 2,1,1,2 recompute none"
  double predicted_step_seconds = 0;
  // The best candidate of another schedule or V, and why it lost; empty when there is none.
  std::string runner_up;
  double runner_up_step_seconds = 0;
  std::string runner_up_reason;
  std::string reason;  // one line: what was chosen, from how many candidates, on which costs
  int candidates = 0;  // simulated
};

// What an "auto" spec (defaults applied) is admitted, placed and calibrated as until the choice
// is made: 1f1b, V = 1, its M, partition cost, recompute none. `ppctl plan --spec` shows it.
pp::v1::JobSpec ProvisionalSpec(pp::v1::JobSpec spec);

// The microbatch sizes calibration must time: B / M for every M the search tries.
// REQUIRES: `spec` has its defaults applied and passed ValidateJobSpec.
std::vector<int> CalibrationSequences(const pp::v1::JobSpec& spec, int fixed_microbatches = 0);

// The choice. REQUIRES: as CalibrationSequences, parallel.schedule "auto". InvalidArgument when
// the calibration does not cover every rank and size, and FailedPrecondition, listing why the
// best candidates were refused, when no candidate fits its workers' memory.
absl::StatusOr<CalibratedPlan> ChooseCalibrated(const pp::v1::JobSpec& spec,
                                                const pp::v1::Calibration& calibration,
                                                int fixed_microbatches = 0);

// The predicted step seconds of a decided layout (`resolved`: a named schedule with explicit
// stage_layers, as CalibratedPlan::spec) on `calibration`, by the same model as the search: what
// bench/planner prints beside each fixed candidate's measured step. InvalidArgument when the
// layout does not plan or the calibration does not cover it.
absl::StatusOr<double> PredictStepSeconds(const pp::v1::JobSpec& resolved,
                                          const pp::v1::Calibration& calibration);

struct Refit {
  pp::v1::Calibration calibration;  // with the trial
  double predicted_step_seconds = 0;  // of the plan that ran the trial steps
};

// `calibration` with `overheads` (plan.h FitStepOverheads of `resolved`'s own traced steps) as its
// trial: the latency less the plan's activation over the slowest link's bandwidth, and
// action_seconds fitted by bisection in [0, span] so that `resolved`'s simulated makespan under
// the calibration and the overheads is the traced span (0 when even that is longer). Errors as
// PredictStepSeconds.
absl::StatusOr<Refit> RefitWithTrial(const pp::v1::JobSpec& resolved,
                                     pp::v1::Calibration calibration,
                                     const pp::v1::StepOverheads& overheads);

}  // namespace pp::plan

#endif  // PP_COORDINATOR_PLAN_CALIBRATED_H_
