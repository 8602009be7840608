// Step arithmetic of a job, shared by the coordinator, the workers and the single-process trainer:
// how many microbatches and tokens one optimizer step takes, where a step's data starts, and
// after which steps a checkpoint is written. Pure.
//
// Words: M = train.microbatches is one data replica's microbatches per step, B =
// train.microbatch_size sequences of T = model.seq_len tokens each, R = parallel.data replicas
// (0 counts as 1). The step's global batch is R x M microbatches.
#ifndef PP_COMMON_STEP_MATH_H_
#define PP_COMMON_STEP_MATH_H_

#include <cstdint>

#include "pp/v1/job.pb.h"

namespace pp::common {

// R x M: the microbatches of one step over every data replica. In int64 for specs not validated
// (a job stored by an older ppcoord); a validated spec's stays below 2^24 (common/spec_bounds.h).
int64_t GlobalMicrobatches(const pp::v1::JobSpec& spec);

// M x B x T: the tokens one data replica trains on per step (what a rank reports). With packed
// microbatches M x tokens_per_microbatch, their most (a step's rows may hold fewer).
int64_t ReplicaTokensPerStep(const pp::v1::JobSpec& spec);

// R x M x B x T: the tokens the whole job trains on per step (the job's tokens per second).
int64_t GlobalTokensPerStep(const pp::v1::JobSpec& spec);

// Sequences consumed before `step` in a run that started at step 0: step x microbatches x
// microbatch_size, where `microbatches` counts every replica's microbatches of a step.
int64_t DataPositionAtStep(int64_t step, int64_t microbatches, int64_t microbatch_size);

// Whether a checkpoint is written once `done_steps` of `total_steps` are complete: after the last
// step and after every multiple of `every_steps` (0: only after the last).
bool CheckpointDue(int done_steps, int total_steps, int every_steps);

// Evaluation (spec.eval): whether any runs (eval.batches >= 1), and whether one runs once
// `done_steps` of `total_steps` are complete: after every multiple of eval.every_steps and after
// the last step, the same rule as CheckpointDue.
bool EvalEnabled(const pp::v1::JobSpec& spec);
bool EvalDue(const pp::v1::JobSpec& spec, int done_steps);

// The held-out split of a data file's window starts (docs/jobs.md "Data windows"). Of W =
// n_tokens - seq_len starts, the last H = floor(W x holdout_fraction) are held out for evaluation,
// and training draws from the first W - H - seq_len: the seq_len starts between them would read
// tokens of the first held-out window. Both counts may come out below 1; validation refuses that.
struct WindowSplit {
  int64_t train_starts = 0;    // training windows start in [0, train_starts)
  int64_t held_out_first = 0;  // held-out windows start in [held_out_first, held_out_first +
  int64_t held_out_starts = 0; //   held_out_starts)
};
// holdout_fraction 0: every start trains (train_starts = W) and none is held out.
WindowSplit SplitWindows(int64_t n_tokens, int64_t seq_len, double holdout_fraction);

// The learning rate of step `step` (1-based, as the step lines count), from train.lr, warmup_steps
// (W), decay, decay_steps (D, DecaySteps below) and min_lr. The shape is nanoGPT's and
// torchtitan's: a linear warm-up, then a cosine or linear decay that holds at min_lr afterwards.
//   s <= W:  lr * s / W
//   s >  W:  q = min(1, (s - W) / D)
//            constant: lr;  cosine: min_lr + (lr - min_lr) (1 + cos(pi q)) / 2;
//            linear:   lr + (min_lr - lr) q   (evaluated as (1 - q) lr + q min_lr: ends at min_lr)
// In double, from the step number alone: every layout, restart and resume applies the same rates
// bitwise, and a checkpoint needs to store nothing about the schedule.
double LearningRateAt(const pp::v1::TrainSpec& train, int step);
// D above: train.decay_steps, or max(1, steps - warmup_steps) when it is 0.
int64_t DecaySteps(const pp::v1::TrainSpec& train);

}  // namespace pp::common

#endif  // PP_COMMON_STEP_MATH_H_
